# Sourced by the compatibility scripts, from the repository's root: sets DSH to the dsh to test —
# $DSH when given, else target/release/dsh, else target/debug/dsh (its plugin libraries beside
# it, as built or installed) — or exits saying how to get one.
if [ -z "${DSH:-}" ]; then
    for candidate in target/release/dsh target/debug/dsh; do
        if [ -x "$candidate" ]; then DSH=$PWD/$candidate; break; fi
    done
fi
[ -n "${DSH:-}" ] && [ -x "$DSH" ] || { echo "no dsh: build it (cargo build) or give DSH=path/to/dsh"; exit 1; }
