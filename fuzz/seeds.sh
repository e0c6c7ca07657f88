#!/usr/bin/env bash
# Generates the seed corpora of every fuzz target into fuzz/corpus/<target>/
# (ignored by git: the nvcc-built fixtures carry NVIDIA code and are never
# committed). Sources: the nvcc fixtures in .cache/fixtures (when built by
# `cargo test`), gcc-built programs and libraries made here, ar archives of
# them, and hand-written capability lists.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd .. && pwd)
out=corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"/{reader,hostelf,runpath,capabilities,emitters,nar,nar_unpack,dlopen,printf,notes,sections}

# gcc-built host files: every layout the writer has a strategy for.
cat >"$work/lib.c" <<'C'
int answer(void) { return 42; }
C
cat >"$work/main.c" <<'C'
extern int answer(void);
int main(void) { return answer() - 42; }
C
g() { gcc "$@" 2>/dev/null || true; }
g -shared -fPIC -o "$work/libplain.so" "$work/lib.c"
g -shared -fPIC -Wl,-rpath,/old/lib -Wl,--disable-new-dtags -o "$work/librpath.so" "$work/lib.c"
g -shared -fPIC -Wl,-rpath,/nix/store/x-cuda-12/lib/stubs:/a -o "$work/libstubs.so" "$work/lib.c"
g -shared -fPIC -Wl,-z,noseparate-code -o "$work/libnosep.so" "$work/lib.c"
g -shared -fPIC -Wl,--no-rosegment -o "$work/libnoro.so" "$work/lib.c" 
g -o "$work/pie" "$work/main.c" -L"$work" -lplain
g -no-pie -o "$work/nopie" "$work/main.c" -L"$work" -lplain
g -no-pie -Wl,-rpath,/x -o "$work/nopie-runpath" "$work/main.c" -L"$work" -lplain
g -m32 -shared -fPIC -nostdlib -o "$work/lib32.so" "$work/lib.c"
g -c -o "$work/lib.o" "$work/lib.c"
g -static -o "$work/static" "$work/main.c" "$work/lib.c"
for f in "$work"/*.so "$work"/pie "$work"/nopie "$work"/nopie-runpath; do
    [ -f "$f" ] || continue
    cp "$f" "$out/hostelf/$(basename "$f")"
    cp "$f" "$out/reader/$(basename "$f")"
    for v in 0 1 2 3; do
        { printf "\\x0$v"; cat "$f"; } >"$out/runpath/$v-$(basename "$f")"
    done
    # Without section headers: the writer's "move" strategy.
    cp "$f" "$work/nosh"; python3 - "$work/nosh" <<'PY'
import sys, struct
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
if b[4] == 2: b[0x28:0x30] = bytes(8); b[0x3c:0x40] = bytes(4)
else: b[0x20:0x24] = bytes(4); b[0x30:0x34] = bytes(4)
open(p, 'wb').write(b)
PY
    { printf '\x00'; cat "$work/nosh"; } >"$out/runpath/nosh-$(basename "$f")"
done
[ -f "$work/lib.o" ] && ar rcs "$work/libgcc.a" "$work/lib.o" && cp "$work/libgcc.a" "$out/hostelf/"
[ -f "$work/lib.o" ] && ar rcsT "$work/libthin.a" "$work/lib.o" && cp "$work/libthin.a" "$out/hostelf/"
[ -f "$work/static" ] && cp "$work/static" "$out/hostelf/static"

# nvcc fixtures (local only; never committed).
if [ -d "$root/.cache/fixtures" ]; then
    find -L "$root/.cache/fixtures" -type f -size -4M | while read -r f; do
        name=$(echo "${f#"$root"/.cache/fixtures/}" | tr '/' '_')
        cp "$f" "$out/reader/$name"
        cp "$f" "$out/hostelf/$name"
        if head -c4 "$f" | grep -q ELF && readelf -d "$f" 2>/dev/null | grep -q NEEDED; then
            { printf '\x00'; cat "$f"; } >"$out/runpath/$name"
        fi
    done
fi

# Capability lists in every spelling the parser accepts, and some it refuses.
i=0
for s in "8.6 9.0" "86;90" "86-real;90-virtual" "8.6;9.0+PTX" "sm_86,sm_90" "compute_90" \
    "12.0a 10.0f" "9.0a" "5.0 6.1 7.0 7.5 8.0 8.6 8.9 9.0" "8.7" "11.0" "" "x" "8.6+ptx;;,  9.0" \
    "12.8 8.6" "99.9" "sm_100a" "10.1" "1.0"; do
    printf '%s' "$s" >"$out/capabilities/seed-$i"; i=$((i + 1))
done
# Emitter records (NUL-separated; the first byte picks file, finding,
# failure or link): hostile names of every kind the tests use.
i=0
for s in '\x01not-utf8-\xff\xfe' '\x05new\nline\r' '\x02esc-\x1b[31m' '\x03-rf' \
    '\x09{"findings":[]}' '\x01::error file=x,title=y::z%%0A,%%25' '\x0050%% a:b,c #frag ?q=1'; do
    printf "$s" >"$out/emitters/seed-$i"; i=$((i + 1))
done
printf '\x01a\x00\x01b\x00\x01c\x00\x01d\x00\x01e\x00\x01f\x00\x01g\x00\x01h\x00\x01i\x00\x01j\x00\x01k\x00\x02x' >"$out/emitters/seed-cap"

# NARs written by Nix itself (nix-store --dump) of small trees, and
# narinfo files written by `nix copy` to a signed file:// cache.
nixdir=$work/nix
mkdir -p "$nixdir/tree/sub" "$nixdir/etc" "$nixdir/home"
printf 'hello\n' >"$nixdir/tree/a"
printf '12345678' >"$nixdir/tree/sub/b"
chmod +x "$nixdir/tree/sub/b"
ln -s ../a "$nixdir/tree/sub/link"
cp "$work/libplain.so" "$nixdir/tree/" 2>/dev/null || true
(
    export NIX_STORE_DIR=/nix/store NIX_STATE_DIR=$nixdir/state NIX_LOG_DIR=$nixdir/log \
        NIX_CONF_DIR=$nixdir/etc HOME=$nixdir/home
    PATH=$root/.tools/nix/bin:$PATH
    nix-store --dump "$nixdir/tree" >"$out/nar/tree.nar"
    nix-store --dump "$nixdir/tree/a" >"$out/nar/file.nar"
    nix-store --dump "$nixdir/tree/sub/link" >"$out/nar/link.nar"
    export NIX_STORE_DIR=$nixdir/store
    nix-store --generate-binary-cache-key seed-1 "$nixdir/sk" "$nixdir/pk"
    p=$(nix-store --add "$nixdir/tree")
    nix --extra-experimental-features nix-command copy \
        --to "file://$nixdir/cache?compression=zstd&secret-key=$nixdir/sk" "$p"
    cp "$nixdir"/cache/nar/* "$out/nar/"
    for c in xz bzip2; do
        nix --extra-experimental-features nix-command copy \
            --to "file://$nixdir/cache-$c?compression=$c" "$p"
        cp "$nixdir"/cache-$c/nar/* "$out/nar/"
    done
    # The parser is fuzzed with /nix/store as the store.
    sed "s|$nixdir/store|/nix/store|g" "$nixdir"/cache/*.narinfo >"$out/nar/narinfo"
) >/dev/null 2>&1 || echo "seeds.sh: Nix is missing (make tools): no NAR seeds" >&2
cp "$out"/nar/*.nar "$out/nar_unpack/" 2>/dev/null || true
# dlopen: the host files, plus callers with literals, a pattern and a
# .note.dlopen note (systemd's JSON shape).
cp "$out"/hostelf/* "$out/dlopen/" 2>/dev/null || true
printf '#include <dlfcn.h>\nconst char *p = "libnvrtc.so.%%d";\nvoid *f(void) { return dlopen("libcudnn_graph.so", 2); }\n' >"$work/dl.c"
g -shared -fPIC -Wl,-soname,libcudnn.so.9 -o "$work/libdl.so" "$work/dl.c" -ldl
printf '[{"feature":"x","description":"y","priority":"required","soname":["liba.so.1","liba.so.0"]}]' >"$work/json"
python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read()+b"\0"; d+=b"\0"*(-len(d)%4); sys.stdout.buffer.write(struct.pack("<III",4,len(d),0x407c0c0a)+b"FDO\0"+d)' "$work/json" >"$work/note" || true
objcopy --add-section .note.dlopen="$work/note" "$work/libdl.so" "$work/libnote.so" 2>/dev/null || true
cp "$work"/libdl.so "$work"/libnote.so "$out/dlopen/" 2>/dev/null || true
# printf: a pattern, a NUL, a name (the patterns dlopen callers use, and
# issue 29's case of many conversions against a long library name).
i=0
for s in 'libplug%d.so\0libplug12.so' 'libnvrtc.so.%d.%d\0libnvrtc.so.12.9' \
    'lib%s.so\0libnccl-net.so' 'lib%02d%%.so\0lib07%.so' 'lib%p.so\0lib0x1.so' \
    'libcudnn_%s.so.%d\0libcudnn_engines_precompiled.so.9' \
    'libc%s%s%s%s%s%s%s%s%s%s%s%s%s%s.so\0libcudnn_engines_precompiled.so.9.19.0' \
    'lib%x%X%u%i.so\0libff0A12.so' 'lib%\0lib'; do
    printf '%b' "$s" >"$out/printf/seed-$i"; i=$((i + 1))
done
# notes: the note above (and a broken one) under 1 or 17 headers,
# staggered or not; sections: fatbins and the note under 17 headers of
# mixed names (fuzz/common/sections.rs says what the leading bytes mean).
if [ -f "$work/note" ]; then
    printf '\x00\x00' | cat - "$work/note" >"$out/notes/one"
    printf '\x01\x00' | cat - "$work/note" "$work/note" >"$out/notes/repeated"
    printf '\x01\x05' | cat - "$work/note" >"$out/notes/staggered"
    { printf '\x01\x80'; cat "$work/note"; printf '\x04\0\0\0\x04\0\0\0\x0a\x0c\x7c\x40FDO\0xxxx'; } >"$out/notes/broken"
    printf '\x01\x10\x00' | cat - "$work/note" >"$out/sections/note"
fi
for f in "$out"/reader/*; do
    [ -f "$f" ] && [ "$(stat -c %s "$f")" -le 262144 ] || continue
    printf '\x01\x01\x00' | cat - "$f" >"$out/sections/same-$(basename "$f")"
    printf '\x01\x12\x40' | cat - "$f" >"$out/sections/mixed-$(basename "$f")"
done
for t in reader hostelf runpath capabilities emitters nar nar_unpack dlopen printf notes sections; do
    echo "$t: $(ls "$out/$t" | wc -l) seeds"
done
