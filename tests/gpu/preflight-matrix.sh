#!/usr/bin/env bash
# The pre-flight's GPU validation matrix (issue 32), run on the lent GPU
# machine as root:
#
#   bash tests/gpu/preflight-matrix.sh CARRY OUT
#
# CARRY holds the static `cuda-preflight` and Debian's libcuda1 and
# libnvidia-ptxjitcompiler1 .deb files of another driver release
# (bookworm's 535.261.03). Each sandbox is a private mount namespace
# (`unshare -m`) with a fresh /dev and /run, the machine's own driver
# folders covered by empty ones (the container's /usr/lib links to them
# then dangle, so only /run/opengl-driver/lib can serve a driver, as on
# NixOS), and the driver link, its target and the device nodes set up as
# the configuration says. In each, as root and as an unprivileged user
# (`setpriv`, as a build user is): cuda-preflight's verdict, a real CUDA
# program (cuInit, a kernel launch; built here with nvcc) and
# torch.cuda.is_available(). OUT/matrix.md is the table, OUT/cells.log the
# raw output.
set -u
carry=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
w=/tmp/pm
rm -rf "$w"; mkdir -p "$w/store" "$w/home" "$w/bin"
chmod 1777 "$w/home"
log=$out/cells.log
: >"$log"

# The machine's driver: where its libcuda.so.1 really is.
# PM_DRIVER and PM_HOSTDEV (a folder of device nodes) stand in for them
# when the script is tried on a machine without a GPU.
real=${PM_DRIVER:-$(dirname "$(readlink -f "$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')")")}
hostdev=${PM_HOSTDEV:-/dev}
kernel=$(awk '/NVRM version/{for(i=1;i<=NF;i++) if ($i ~ /^[0-9]+\.[0-9]+\.[0-9]+$/) {print $i; exit}}' /proc/driver/nvidia/version 2>/dev/null)
echo "driver folder $real, kernel module $kernel" | tee -a "$log"
{ nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; uname -r; nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__)'; id nobody; } 2>&1 | tee -a "$log"
ls -l "$hostdev"/nvidia* | tee -a "$log"
grep -i nvidia /proc/devices | tee -a "$log"

# Targets of the driver link: this machine's driver (bound, not copied),
# and Debian's 535 libraries unpacked.
mkdir -p "$w/store/driver-host/lib" "$w/store/driver-535/lib"
mount --bind "$real" "$w/store/driver-host/lib"
for deb in "$carry"/*.deb; do dpkg-deb -x "$deb" "$w/deb"; done
cp -a "$w"/deb/usr/lib/x86_64-linux-gnu/nvidia/current/. "$w/store/driver-535/lib/"
ls -l "$w/store/driver-535/lib" | tee -a "$log"
cp "$carry/cuda-preflight" "$w/bin/"
nvcc -O2 -arch=sm_90 -o "$w/bin/probe" "$here/preflight-probe.cu" -ldl 2>&1 | tail -3
chmod -R a+rX "$w/bin" "$w/store/driver-535" "$w/home"

# What the loader could find outside the link: the driver folders are
# covered whole; a libcuda file elsewhere (a folder such as /usr/lib, which
# must stay) is covered alone by an empty file.
hide="/usr/local/nvidia/lib64 /usr/local/nvidia/lib"
: >"$w/empty"
hidefiles=$(for f in $(ldconfig -p | awk '/libcuda\.so/{print $NF}'); do r=$(readlink -f "$f"); case $r in /usr/local/nvidia/*) ;; *) echo "$r" ;; esac; done | sort -u | tr '\n' ' ')
echo "hidden in every sandbox: $hide; files: ${hidefiles:-none}" | tee -a "$log"

# sandbox CONFIG USER: runs the three witnesses in a fresh namespace.
sandbox() {
  local config=$1 user=$2
  unshare -m --propagation private bash -s "$config" "$user" "$w" "$hide" "$hidefiles" "$hostdev" <<'INNER'
config=$1 user=$2 w=$3 hide=$4 hidefiles=$5 hostdev=$6
mkdir -p "$w/hostdev"; mount --bind /dev "$w/hostdev"
mkdir -p "$w/gpudev"; mount --bind "$hostdev" "$w/gpudev"
for d in $hide; do [ -d "$d" ] && mount -t tmpfs -o ro tmpfs "$d"; done
for f in $hidefiles; do mount --bind "$w/empty" "$f"; done
mount -t tmpfs -o mode=755 tmpfs /dev
for n in null zero full random urandom tty; do touch "/dev/$n"; mount --bind "$w/hostdev/$n" "/dev/$n"; done
mkdir -p /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /dev/shm
ln -s /proc/self/fd /dev/fd
mount -t tmpfs -o mode=755 tmpfs /run
node() { touch "/dev/$1" && mount --bind "$w/gpudev/$1" "/dev/$1"; }
case $config in
  nothing) ;;
  nodes-no-driver) node nvidiactl; node nvidia0; node nvidia-uvm; node nvidia-uvm-tools ;;
  dangling-link) node nvidiactl; node nvidia0; node nvidia-uvm; node nvidia-uvm-tools
    ln -s "$w/store/not-mounted" /run/opengl-driver ;;
  driver-no-nodes) ln -s "$w/store/driver-host" /run/opengl-driver ;;
  no-uvm) node nvidiactl; node nvidia0
    ln -s "$w/store/driver-host" /run/opengl-driver ;;
  driver-535) node nvidiactl; node nvidia0; node nvidia-uvm; node nvidia-uvm-tools
    ln -s "$w/store/driver-535" /run/opengl-driver ;;
  everything) node nvidiactl; node nvidia0; node nvidia-uvm; node nvidia-uvm-tools
    ln -s "$w/store/driver-host" /run/opengl-driver ;;
esac
run() {
  if [ "$user" = root ]; then env -u LD_LIBRARY_PATH HOME="$w/home" "$@"
  else setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all env -u LD_LIBRARY_PATH HOME="$w/home" "$@"; fi
}
echo "### $config $user"
ls -l /dev/ | grep nvidia
run "$w/bin/cuda-preflight" --format json --gpu-capability 9.0 "$w/bin/probe" >"$w/pf.json"; echo "preflight-rc: $?"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["preflight"]; print("preflight-errors:", ",".join(sorted({c["id"] for c in r["checks"] if c["status"]=="error"})) or "-"); print("preflight-warnings:", ",".join(sorted({c["id"] for c in r["checks"] if c["status"]=="warning"})) or "-")' "$w/pf.json"
run "$w/bin/cuda-preflight" | sed 's/^/  | /'
run env LD_LIBRARY_PATH=/run/opengl-driver/lib "$w/bin/probe"; echo "probe-rc: $?"
run env LD_LIBRARY_PATH=/run/opengl-driver/lib timeout 120 python3 -c 'import torch; print("torch:", torch.cuda.is_available())' 2>&1 | grep -E "^torch:|Error" | tail -2
ls -l /dev/ | grep nvidia | sed 's/^/after: /'
INNER
}

printf '| configuration | user | cuda-preflight | errors (warnings) | cuInit | kernel launch | torch.cuda.is_available() | agree |\n|---|---|---|---|---|---|---|---|\n' >"$out/matrix.md"
for config in nothing nodes-no-driver dangling-link driver-no-nodes no-uvm driver-535 everything; do
  for user in root nobody; do
    cell=$(sandbox "$config" "$user" 2>&1)
    echo "$cell" >>"$log"
    rc=$(sed -n 's/^preflight-rc: //p' <<<"$cell")
    errs=$(sed -n 's/^preflight-errors: //p' <<<"$cell")
    warns=$(sed -n 's/^preflight-warnings: //p' <<<"$cell")
    init=$(sed -n 's/^cuInit: //p' <<<"$cell")
    [[ -n $init ]] || init=$(grep -m1 '^dlopen:' <<<"$cell" | cut -c1-60)
    init=${init:-not reached}
    prc=$(sed -n 's/^probe-rc: //p' <<<"$cell")
    launch=$(sed -n 's/^launch: \([0-9-]*\) sync: \([0-9-]*\) result: \([0-9]*\)/launch \1, sync \2, result \3/p' <<<"$cell")
    launch=${launch:-$(grep -E '^malloc:' <<<"$cell" | head -1)}
    torch=$(sed -n 's/^torch: //p' <<<"$cell"); torch=${torch:-error}
    verdict=$([ "$rc" = 0 ] && echo ready || echo "not ready ($rc)")
    really=$([ "$prc" = 0 ] && echo 1 || echo 0)
    ready=$([ "$rc" = 0 ] && echo 1 || echo 0)
    ttrue=$([ "$torch" = True ] && echo 1 || echo 0)
    agree=$([ "$ready" = "$really" ] && [ "$ready" = "$ttrue" ] && echo yes || echo NO)
    echo "| $config | $user | $verdict | ${errs:--} (${warns:--}) | $init | ${launch:-none} (exit $prc) | $torch | $agree |" >>"$out/matrix.md"
  done
done
cat "$out/matrix.md"
