// SPDX-License-Identifier: MIT
/* A statically linked program: usmc-run must warn that usmc cannot act on it. */
int main(void) { return 0; }
