# SPDX-License-Identifier: MIT
"""lintian on a built .deb, as Debian's archive and a packager would run it:
its full output printed, and a failure for every error and for every warning
not overridden (the overrides the package installs say why each is wrong for
usmc; lintian shows the ones it applied as O: lines)."""
import shutil
import subprocess

from harness import check


def lintian_check(deb):
    if not check(shutil.which("lintian") is not None, "lintian is installed (scripts/install-deps.sh)"):
        return
    # -I: the informational tags too, --show-overrides: the overridden ones
    # as O:, so the output shows everything lintian thought of the package.
    r = subprocess.run(["lintian", "-I", "--show-overrides", "--tag-display-limit", "0",
                        "--fail-on", "error,warning", deb],
                       capture_output=True, text=True, timeout=600)
    print("  info lintian output:")
    for line in (r.stdout + r.stderr).splitlines():
        print("    " + line)
    tags = [line for line in r.stdout.splitlines() if line[:2] in ("E:", "W:")]
    check(not tags, f"lintian: no errors, no warnings that are not overridden ({len(tags)})")
    # Exit 2: it found an error or a warning; anything else but 0 is its own
    # trouble (a package it could not read).
    check(r.returncode == (2 if tags else 0), f"lintian ran to its end (exit {r.returncode})")
