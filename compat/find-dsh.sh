# Sourced by the compatibility scripts, from the repository's root: sets DSH to the dsh to test —
# $DSH when given, else this tree's own, built first (cargo build --workspace: the dsh binary and
# its plugin libraries beside it), so a script never tests a build older than the tree — or exits
# saying how to get one.
if [ -z "${DSH:-}" ]; then
    cargo build --workspace --quiet || { echo "cargo build failed: fix the build or give DSH=path/to/dsh"; exit 1; }
    DSH=$PWD/target/debug/dsh
fi
[ -x "$DSH" ] || { echo "no dsh at $DSH: give DSH=path/to/dsh"; exit 1; }
