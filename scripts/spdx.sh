#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Gives every tracked C/C++, CMake, Python and shell source an SPDX licence
# line, so a file copied out of the tree still says its licence (LICENSE):
#   // SPDX-License-Identifier: MIT      (C and C++)
#   # SPDX-License-Identifier: MIT       (CMake, Python, shell)
# as its first line, or right after a shebang (and a Python coding line,
# which must stay within the first two). Files that already have one (a
# comment line of their first five that starts with it) are left alone.
#   scripts/spdx.sh           add the line where it is missing
#   scripts/spdx.sh --check   list the files without one; exit 1 if any
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# The comment leader of a source file, or nothing for a file of no kind here.
leader() {
  case "$1" in
    *.c | *.cc | *.cpp | *.cxx | *.h | *.hh | *.hpp) echo "//" ;;
    CMakeLists.txt | */CMakeLists.txt | *.cmake | *.py | *.sh) echo "#" ;;
    # bash completions: sourced, so neither extension nor shebang
    */completion/*) echo "#" ;;
    *)
      # Extensionless scripts (.ci/run, tools for a PATH): by their shebang.
      if head -n 1 -- "$1" | grep -Eq '^#!.*[/ ](ba|da)?sh([[:space:]]|$)|^#!.*python'; then
        echo "#"
      fi
      ;;
  esac
}

missing=0
while IFS= read -r -d '' file; do
  [[ -f "$file" && ! -L "$file" ]] || continue
  lead=$(leader "$file")
  [[ -n "$lead" ]] || continue
  head -n 5 -- "$file" | grep -Eq '^(//|#|/\*) ?SPDX-License-Identifier:' && continue
  missing=$((missing + 1))
  if [[ $check -eq 1 ]]; then
    echo "$file"
    continue
  fi
  tmp=$(mktemp)
  awk -v line="$lead SPDX-License-Identifier: MIT" '
    NR == 1 && /^#!/ { print; shebang = 1; next }
    NR == 2 && shebang && /^#.*coding[:=]/ { print; next }
    !done { print line; done = 1 }
    { print }
    END { if (!done) print line }
  ' "$file" >"$tmp"
  # Written through the file itself, so its mode (executable scripts) stays.
  cat "$tmp" >"$file"
  rm -f "$tmp"
  echo "spdx: $file" >&2
done < <(git ls-files -z)

if [[ $check -eq 1 && $missing -gt 0 ]]; then
  echo "spdx: $missing file(s) without an SPDX-License-Identifier line" >&2
  exit 1
fi
exit 0
