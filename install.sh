#!/bin/sh
# Installs dsh under a prefix, so it runs without its source tree:
#
#   ./install.sh                   # builds (cargo build --release --workspace), then writes
#                                  #   PREFIX/bin/dsh and PREFIX/lib/dsh/<bundled plugins>
#   ./install.sh ~/.local          # the same under another prefix
#
# The default prefix is the one cargo runs from (~/.cargo with rustup), so `dsh` is on PATH
# wherever `cargo` is; when cargo's folder cannot be written, ~/.local.
#
# dsh finds its bundled plugin libraries beside its executable, then in ../lib/dsh/ relative to
# it, then in $DSH_PLUGIN_PATH. DSH_INSTALL_FROM=DIR installs what DIR already holds (a cargo
# profile directory such as target/release) instead of building.
set -eu
if [ $# -gt 1 ]; then
    echo "usage: $0 [PREFIX]" >&2
    exit 2
fi
default_prefix() {
    cargo_bin=$(dirname "$(command -v cargo 2>/dev/null || echo /nonexistent/cargo)")
    if [ -w "$cargo_bin" ]; then
        dirname "$cargo_bin"
    else
        echo "$HOME/.local"
    fi
}
prefix=${1:-$(default_prefix)}
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
case ":$PATH:" in
    *":$prefix/bin:"*) ;;
    *) echo "note: $prefix/bin is not on PATH; add it (export PATH=\"$prefix/bin:\$PATH\") to run plain dsh" ;;
esac
