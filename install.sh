#!/bin/sh
# Installs dsh under a prefix, so it runs without its source tree:
#
#   ./install.sh ~/.local          # builds (cargo build --release --workspace), then writes
#                                  #   ~/.local/bin/dsh and ~/.local/lib/dsh/<bundled plugins>
#
# dsh finds its bundled plugin libraries beside its executable, then in ../lib/dsh/ relative to
# it, then in $DSH_PLUGIN_PATH. DSH_INSTALL_FROM=DIR installs what DIR already holds (a cargo
# profile directory such as target/release) instead of building.
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
prefix=$1
cd "$(dirname "$0")"
if [ -n "${DSH_INSTALL_FROM:-}" ]; then
    from=$DSH_INSTALL_FROM
else
    cargo build --release --workspace --locked
    from=target/release
fi
case "$(uname -s)" in
    Darwin) prefix_lib=lib suffix=.dylib ;;
    *) prefix_lib=lib suffix=.so ;;
esac
mkdir -p "$prefix/bin" "$prefix/lib/dsh"
cp "$from/dsh" "$prefix/bin/dsh.new" && mv "$prefix/bin/dsh.new" "$prefix/bin/dsh"
chmod 755 "$prefix/bin/dsh"
for package in plugins/*/; do
    name=$(basename "$package" | tr - _)
    library="$from/$prefix_lib$name$suffix"
    if [ ! -f "$library" ]; then
        echo "install.sh: $library is missing; build the workspace first" >&2
        exit 1
    fi
    cp "$library" "$prefix/lib/dsh/$prefix_lib$name$suffix.new"
    mv "$prefix/lib/dsh/$prefix_lib$name$suffix.new" "$prefix/lib/dsh/$prefix_lib$name$suffix"
done
echo "installed $("$prefix/bin/dsh" --version) into $prefix (bin/dsh, lib/dsh/)"
