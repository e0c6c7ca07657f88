#!/usr/bin/env python3
"""The second half of benches/survey.sh: lay out, audit, fix, audit again,
check the dlopen findings against the loader, write docs/survey.md.

Called by survey.sh with the manifest of downloaded packages; see that script
for what the survey is and why each package is in it. Standard library only.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter, defaultdict

NIX_BASE32 = "0123456789abcdfghijklmnpqrsvwxyz"
SITE = "lib/python3.11/site-packages"
EM_X86_64 = 62
DLOPEN_CHECKS = ("dlopen-resolved", "dlopen-unresolved")
# The text report is for people: the bound on a line.
LINE_LIMIT = 300


def store_hash(text):
    """A 32-character Nix-style hash, the same for the same package on every run."""
    digest = hashlib.sha256(("survey:" + text).encode()).digest()
    return "".join(NIX_BASE32[b % 32] for b in digest[:32])


def read_manifest(path):
    pkgs = []
    with open(path) as f:
        for line in f:
            pid, source, spec, src, sha, pinned, layout, why = line.rstrip("\n").split("\t")
            if source == "wheel":
                pname, version = spec.split("==")
            else:
                pname, full = spec.split("=", 1)
                # 7:5.1.6-0+deb12u1 -> 5.1.6: a store name carries the upstream version.
                version = full.split(":", 1)[-1].rsplit("-", 1)[0]
                if source != "deb:amd64":
                    pname += "-" + source.split(":")[1]
            pkgs.append(dict(id=pid, source=source, spec=spec, src=src, sha=sha, pinned=pinned,
                             layout=layout, why=why, pname=pname, version=version))
    for p in pkgs:
        p["name"] = f"{store_hash(p['id'] + p['sha'])}-{p['pname']}-{p['version']}"
    return pkgs


# ---- layout --------------------------------------------------------------------------------

def extract(zf, member, dest):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with zf.open(member) as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.chmod(dest, 0o755)


def is_library(member):
    base = member.rsplit("/", 1)[-1]
    return (".so" in base and not base.endswith(".py")) or "/bin/" in member


def layout_redist(wheel, out):
    """NVIDIA's redist wheels as Nixpkgs lays the redist out: every file of
    nvidia/<component>/lib (cu13: nvidia/cu13/lib) in $out/lib."""
    n = 0
    with zipfile.ZipFile(wheel) as zf:
        for m in zf.namelist():
            parts = m.split("/")
            if parts[0] == "nvidia" and "lib" in parts[:-1] and is_library(m) and not m.endswith("/"):
                extract(zf, m, os.path.join(out, "lib", parts[-1]))
                n += 1
    return n


def layout_python(wheel, out, only_nvidia=False):
    """A Python wheel as pip installs it, shared objects only."""
    n = 0
    with zipfile.ZipFile(wheel) as zf:
        for m in zf.namelist():
            if m.endswith("/") or not is_library(m) or ".dist-info/" in m:
                continue
            if only_nvidia and not m.startswith("nvidia/"):
                continue
            extract(zf, m, os.path.join(out, SITE, m))
            n += 1
    return n


def layout_deb(deb, out):
    """A .deb's multiarch library folder (usr/lib/<triple>, lib/<triple>) as
    $out/lib, links and hard links as dpkg-deb made them."""
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        subprocess.run(["dpkg-deb", "-x", deb, tmp], check=True)
        os.makedirs(out, exist_ok=True)
        n = 0
        for top in ("usr/lib", "lib"):
            base = os.path.join(tmp, top)
            if not os.path.isdir(base):
                continue
            for triple in sorted(os.listdir(base)):
                src = os.path.join(base, triple)
                if triple.endswith("-linux-gnu") and os.path.isdir(src):
                    # cp -a keeps hard links between the names (mesa's DRI drivers).
                    os.makedirs(os.path.join(out, "lib"), exist_ok=True)
                    subprocess.run(["cp", "-a", src + "/.", os.path.join(out, "lib")], check=True)
                    n += sum(len(fs) for _, _, fs in os.walk(src))
        return n


def lay_out(pkgs, store):
    """Each package once as $store/<name>; kept between runs (a marker names
    the source's sha256, so a new download is laid out again)."""
    by_id = {p["id"]: p for p in pkgs}
    for p in pkgs:
        out = os.path.join(store, p["name"])
        marker = os.path.join(store, ".done", p["name"])
        p["out"] = out
        if os.path.exists(marker):
            continue
        shutil.rmtree(out, ignore_errors=True)
        print(f"survey.py: laying out {p['name']}", file=sys.stderr)
        tmp = out + ".partial"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        if p["layout"] == "redist":
            n = layout_redist(p["src"], tmp)
        elif p["layout"] == "python":
            n = layout_python(p["src"], tmp)
        elif p["layout"].startswith("tree:"):
            n = layout_python(p["src"], tmp)
            for member in p["layout"][5:].split(","):
                if member not in by_id:
                    sys.exit(f"survey.py: {p['id']}'s tree names {member}, which is not downloaded")
                n += layout_python(by_id[member]["src"], tmp, only_nvidia=True)
        elif p["layout"] == "deb":
            n = layout_deb(p["src"], tmp)
        else:
            sys.exit(f"survey.py: unknown layout {p['layout']} of {p['id']}")
        if n == 0:
            sys.exit(f"survey.py: {p['src']} holds no library to lay out")
        os.rename(tmp, out)
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        open(marker, "w").close()


# ---- audit ---------------------------------------------------------------------------------

class Audit:
    """One run of cuda-elf-inspect on one store path: its JSON, text, exit status."""

    def __init__(self, tool, caps, store, out, stem, facts):
        self.path = os.path.join(store, os.path.basename(out))
        cmd = [tool, "--cuda-capabilities", caps, "--format", "json", "--color", "never",
               "--output", f"text={stem}.txt"]
        if facts:
            cmd.append("--dlopen-facts")
        env = dict(os.environ, NIX_STORE=store)
        for var in ("cudaCapabilities", "CUDAARCHS", "TORCH_CUDA_ARCH_LIST", "NIX_BUILD_TOP",
                    "NIX_LOG_FD", "outputs", "out"):
            env.pop(var, None)
        t0 = time.monotonic()
        r = subprocess.run(cmd + [self.path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env)
        self.seconds = time.monotonic() - t0
        self.rc = r.returncode
        self.stderr = r.stderr.decode(errors="replace")
        self.panic = self.rc == 101 or "panicked at" in self.stderr or self.rc < 0
        with open(stem + ".json", "wb") as f:
            f.write(r.stdout)
        try:
            self.json = json.loads(r.stdout)
        except ValueError:
            self.json = {"files": [], "findings": [], "failures": [], "summary": {}}
        try:
            with open(stem + ".txt", errors="replace") as f:
                # Lines as they read on a machine whose store is /nix/store.
                self.lines = [l.rstrip("\n").replace(store, "/nix/store") for l in f]
        except OSError:
            self.lines = []
        self.findings = self.json.get("findings", [])
        self.files = self.json.get("summary", {}).get("files", len(self.json.get("files", [])))

    def count(self, severity):
        return sum(1 for f in self.findings if f["severity"] == severity)

    def by_check(self):
        return Counter((f["check"], f["severity"]) for f in self.findings)

    def longest(self):
        return max((len(l) for l in self.lines), default=0)


def fix(tool, out):
    r = subprocess.run([tool, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = r.stderr.decode(errors="replace")
    return dict(rc=r.returncode, panic=r.returncode == 101 or "panicked at" in err or r.returncode < 0,
                stderr=err[-2000:])


# ---- the loader oracle ---------------------------------------------------------------------

def elf_machine(path):
    """(class, machine) of an ELF file, or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "little" if head[5] == 1 else "big"
    return head[4], int.from_bytes(head[18:20], order)


def library_dirs(out):
    return sorted({d for d, _, fs in os.walk(out) if any(".so" in f for f in fs)})


class Oracle:
    """glibc's answer for one caller: the folders its own dlopen searches."""

    def __init__(self, harness, run_dir, libcuda_dirs):
        self.harness = harness
        self.run_dir = run_dir
        self.libcuda_dirs = libcuda_dirs
        self.cache = {}
        self.fill = set()
        shutil.rmtree(os.path.join(run_dir, "stubs"), ignore_errors=True)

    def search_list(self, caller, pkg_out, has_runpath):
        """(dirs, None) or (None, why it could not be checked)."""
        key = caller
        if key in self.cache:
            return self.cache[key]
        # LD_LIBRARY_PATH: the package's own folders and the driver's, so that
        # the caller's NEEDED libraries load; cut out of the list again below.
        # A NEEDED library that neither has (a Debian package's dependencies)
        # gets an empty stand-in in the stubs folder, and a missing symbol a
        # definition in a preloaded library: only to load the caller, whose
        # own search list they do not change.
        stubs = os.path.join(self.run_dir, "stubs")
        os.makedirs(stubs, exist_ok=True)
        ldlp = list(dict.fromkeys(library_dirs(pkg_out) + self.libcuda_dirs + [stubs]))
        out = os.path.join(self.run_dir, "oracle.out")
        for _ in range(400):
            rows, why = self.run_harness(out, caller, ldlp)
            if why is not None:
                return self.remember(key, None, why)
            errors = [r[1] for r in rows if r[0] == "error"]
            if not errors:
                break
            if not self.stub_for(errors[0], stubs):
                return self.remember(key, None, "dlopen failed: " + errors[0])
        else:
            return self.remember(key, None, "dlopen failed after 400 stand-ins: " + errors[0])
        main = [r[1] for r in rows if r[0] == "main"]
        mine = [r[1] for r in rows if r[0] == "caller"]
        defaults = main[len(ldlp):]
        if main[:len(ldlp)] != ldlp or mine[len(mine) - len(defaults):] != defaults:
            return self.remember(key, None, "glibc's list is not LD_LIBRARY_PATH + defaults as expected")
        mine = mine[:len(mine) - len(defaults)]
        # glibc's order: RPATH chain (only without RUNPATH), LD_LIBRARY_PATH, RUNPATH.
        if has_runpath:
            if mine[:len(ldlp)] != ldlp:
                return self.remember(key, None, "LD_LIBRARY_PATH is not before RUNPATH in glibc's list")
            own = mine[len(ldlp):]
        else:
            if mine[len(mine) - len(ldlp):] != ldlp:
                return self.remember(key, None, "LD_LIBRARY_PATH is not after RPATH in glibc's list")
            own = mine[:len(mine) - len(ldlp)]
        return self.remember(key, own, None)

    def run_harness(self, out, caller, ldlp):
        if os.path.exists(out):
            os.unlink(out)
        env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": ":".join(ldlp)}
        fill = os.path.join(self.run_dir, "stubs", "libsurvey-fill.so")
        if os.path.exists(fill):
            env["LD_PRELOAD"] = fill
        try:
            subprocess.run([self.harness, out, caller], env=env, timeout=60,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None, "loading it took over 60 s"
        try:
            with open(out, errors="replace") as f:
                rows = [l.rstrip("\n").split("\t", 1) for l in f]
        except OSError:
            return None, "the harness wrote nothing (killed while loading?)"
        if not rows or rows[-1] != ["end"]:
            return None, "the harness stopped while loading it (a constructor exited or crashed)"
        return rows, None

    def stub_for(self, error, stubs):
        """Makes the stand-in that error asks for; False when it is no such error."""
        m = re.match(r"(\S+?): cannot open shared object file", error)
        if m and "/" not in m.group(1) and not os.path.exists(os.path.join(stubs, m.group(1))):
            return self.cc(os.path.join(stubs, m.group(1)), "", m.group(1))
        m = re.search(r"undefined symbol: ([A-Za-z_][A-Za-z0-9_]*)", error)
        if m:
            self.fill.add(m.group(1))
            src = "".join(f"char {s}[64];\n" for s in sorted(self.fill))
            return self.cc(os.path.join(stubs, "libsurvey-fill.so"), src, "libsurvey-fill.so")
        return False

    def cc(self, lib, source, soname):
        src = os.path.join(self.run_dir, "stub.c")
        with open(src, "w") as f:
            f.write(source + "int survey_stub;\n")
        r = subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src, f"-Wl,-soname,{soname}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return r.returncode == 0

    def remember(self, key, dirs, why):
        self.cache[key] = (dirs, why)
        return dirs, why


def find_in(dirs, names):
    """The file glibc's search of these folders opens for the first name found:
    a file of this machine's class and machine (others are skipped, as glibc does)."""
    for name in names:
        if "/" in name:
            continue
        for d in dirs:
            cand = os.path.join(d, name)
            if os.path.isfile(cand) and elf_machine(cand) == (2, EM_X86_64):
                return os.path.realpath(cand)
    return None


def check_dlopen(audit, pkg, oracle, run_dir):
    """Each dlopen finding of an x86_64 caller against glibc's search list."""
    files = {f["path"]: f for f in audit.json.get("files", [])}
    result = dict(agree=0, disagree=[], skipped=[])
    for f in audit.findings:
        if f["check"] not in DLOPEN_CHECKS:
            continue
        caller = f["path"]
        soname = (f.get("details") or {}).get("library", "")
        info = files.get(caller, {})
        dyn = info.get("dynamic") or {}
        if dyn.get("machine") not in (None, EM_X86_64) or elf_machine(caller) != (2, EM_X86_64):
            result["skipped"].append((caller, soname, "not an x86_64 file: this machine cannot load it"))
            continue
        target = next((t for t in (info.get("dlopen") or {}).get("targets", [])
                       if t.get("soname") == soname), None)
        asked = (target or {}).get("asked") or [soname]
        if all("/" in a for a in asked):
            result["skipped"].append((caller, soname, "asked by path, not by name"))
            continue
        if target is not None and target.get("resolved", {}).get("path"):
            audit_at = os.path.realpath(target["resolved"]["path"])
        else:
            m = re.search(r" resolves at (\S+) ", f["message"])
            audit_at = os.path.realpath(m.group(1)) if m else None
        if f["check"] == "dlopen-unresolved":
            audit_at = None
        dirs, why = oracle.search_list(os.path.realpath(caller), pkg["out_used"],
                                       bool(dyn.get("runpath")))
        if dirs is None:
            result["skipped"].append((caller, soname, why))
            continue
        glibc_at = find_in(dirs, asked)
        if glibc_at == audit_at:
            result["agree"] += 1
        else:
            result["disagree"].append(dict(caller=caller, soname=soname, asked=asked,
                                           audit=audit_at, glibc=glibc_at, dirs=dirs,
                                           check=f["check"]))
    return result


# ---- the report ----------------------------------------------------------------------------

def short(path, store):
    return path.replace(store, "/nix/store") if path else "(nowhere)"


def checks_cell(counter):
    if not counter:
        return "none"
    sev = {"error": "E", "warning": "W", "info": "I"}
    return ", ".join(f"{c} {sev.get(s, s)}{n}" for (c, s), n in
                     sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def ratio(a):
    return a.count("warning") / a.files if a.files else 0.0


def read_reasons(path):
    reasons = {}
    with open(path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                check, reason = line.rstrip("\n").split("\t", 1)
                reasons[check] = reason
    return reasons


def write_doc(args, pkgs, store, results, reasons):
    L = []
    w = L.append
    befores = [r["before"] for r in results]
    afters = [r["after"] for r in results]
    med_b = statistics.median(ratio(a) for a in befores)
    med_a = statistics.median(ratio(a) for a in afters)
    longest = max(((a.longest(), r["pkg"]["id"], which) for r in results
                   for which, a in (("before", r["before"]), ("after", r["after"]))),
                  default=(0, "-", "-"))
    over = sum(1 for a in befores + afters for l in a.lines if len(l) > LINE_LIMIT)
    panics = sum(a.panic for a in befores + afters) + sum(r["fix"]["panic"] for r in results)
    exit2 = sum(a.rc == 2 for a in befores + afters)
    agree = sum(r[k]["agree"] for r in results for k in ("oracle_before", "oracle_after"))
    disagree = [d for r in results for k in ("oracle_before", "oracle_after") for d in r[k]["disagree"]]
    skipped = [(r["pkg"]["id"], k[7:]) + s for r in results
               for k in ("oracle_before", "oracle_after") for s in r[k]["skipped"]]
    files = sum(a.files for a in befores)
    w("# Survey: the audit on real packages nobody here wrote")
    w("")
    w("Made by `benches/survey.sh` (issue 30, item 7); do not edit by hand, run it again. "
      f"Audited build: commit {args.commit}, `{os.path.basename(args.bin)}` binaries "
      f"({args.version}); `--cuda-capabilities '{args.caps}'`, one store path per audit, "
      f"`NIX_STORE` set to the survey's store. Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
      f"{args.seconds:.0f} s." + (" **Partial run (SURVEY_ONLY).**" if args.partial == "yes" else ""))
    w("")
    w("*Before* is the package as downloaded; *after* is a copy after `auto-add-driver-runpath "
      "STORE_PATH` (what `autoAddDriverRunpath` does in a build): what remains after the fix "
      "is what no packaging step clears.")
    w("")
    w("Each package is laid out alone and unpatched (no autoPatchelfHook, no dependency store "
      "paths), so `unresolved-needed` on libraries of other packages (libstdc++, libgcc_s, "
      "another wheel's libcublas, a .deb's dependencies) is the survey's layout, not a defect "
      "of the package; it is counted like any other finding so that runs compare.")
    w("")
    w("## Summary")
    w("")
    w("| measure | value | issue 30's bound |")
    w("|---|---|---|")
    w(f"| packages | {len(results)} | at least 30 |")
    w(f"| files audited | {files} | |")
    w(f"| warnings per file, median package, before / after the fix | {med_b:.2f} / {med_a:.2f} | at most 2 |")
    w(f"| longest text line | {longest[0]} characters ({longest[1]}, {longest[2]}) | at most {LINE_LIMIT} |")
    w(f"| text lines over {LINE_LIMIT} characters | {over} | 0 |")
    w(f"| panics (audit or fix) | {panics} | 0 |")
    w(f"| audits that exited 2 | {exit2} | 0 on valid files |")
    w(f"| dlopen findings checked by the loader oracle: agree / disagree / not checkable | "
      f"{agree} / {len(disagree)} / {len(skipped)} | every checkable one agrees |")
    w("")
    w("## Per package")
    w("")
    w("Findings by check: `E` error, `W` warning, `I` info, with counts. Files: the audit's "
      "`summary.files`. W/file: warnings per file.")
    w("")
    w("| package | version | files | exit before/after | E/W/I before | E/W/I after | W/file before | W/file after | findings before | findings after |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        p, b, a = r["pkg"], r["before"], r["after"]
        w(f"| {p['pname']} | {p['version']} | {b.files} | {b.rc}/{a.rc} | "
          f"{b.count('error')}/{b.count('warning')}/{b.count('info')} | "
          f"{a.count('error')}/{a.count('warning')}/{a.count('info')} | {ratio(b):.2f} | {ratio(a):.2f} | "
          f"{checks_cell(b.by_check())} | {checks_cell(a.by_check())} |")
    w("")
    w("## Warning classes")
    w("")
    w("Every check that produced a warning or an error anywhere, with the reason a maintainer "
      "can act on it, from `benches/survey-reasons.tsv` (reviewed by hand; **TODO** marks a "
      "class nobody has justified yet).")
    w("")
    w("| check | severity | findings before | after | packages (after) | why it is actionable |")
    w("|---|---|---|---|---|---|")
    classes = Counter()
    classes_after = Counter()
    pk = defaultdict(set)
    for r in results:
        for f in r["before"].findings:
            if f["severity"] != "info":
                classes[(f["check"], f["severity"])] += 1
        for f in r["after"].findings:
            if f["severity"] != "info":
                classes_after[(f["check"], f["severity"])] += 1
                pk[(f["check"], f["severity"])].add(r["pkg"]["id"])
    for key in sorted(set(classes) | set(classes_after)):
        w(f"| `{key[0]}` | {key[1]} | {classes[key]} | {classes_after[key]} | {len(pk[key])} | "
          f"{reasons.get(key[0], '**TODO**')} |")
    w("")
    w("## What remains after the fix, by library")
    w("")
    w("The warnings and errors left after `auto-add-driver-runpath`, grouped by check and "
      "subject (the `details` of the finding): the first place to look for noise.")
    w("")
    w("| check | subject | findings | packages |")
    w("|---|---|---|---|")
    subj = Counter()
    subj_pk = defaultdict(set)
    for r in results:
        for f in r["after"].findings:
            if f["severity"] == "info":
                continue
            d = f.get("details") or {}
            key = (f["check"], ", ".join(f"{v}" for v in d.values()) or "-")
            subj[key] += 1
            subj_pk[key].add(r["pkg"]["id"])
    for key, n in sorted(subj.items(), key=lambda kv: (-kv[1], kv[0]))[:60]:
        w(f"| `{key[0]}` | {key[1]} | {n} | {', '.join(sorted(subj_pk[key]))} |")
    if len(subj) > 60:
        w(f"| ... | {len(subj) - 60} more subjects | | |")
    w("")
    w("## Loader oracle (dlopen)")
    w("")
    w("For each `dlopen-resolved` / `dlopen-unresolved` finding of an x86_64 file, "
      "`benches/survey-oracle.c` loads the caller (`dlopen(caller, RTLD_LAZY)`, with the "
      "package's own folders and libcuda1's on `LD_LIBRARY_PATH` so that its NEEDED libraries "
      "load) and asks glibc for the caller's search list (`dlinfo(RTLD_DI_SERINFO)`: RPATH chain "
      "without RUNPATH, LD_LIBRARY_PATH, RUNPATH with `$ORIGIN` expanded, defaults). The "
      "LD_LIBRARY_PATH part and the default folders are cut out (a Nix store file on NixOS has "
      "no use for Debian's `/usr/lib/x86_64-linux-gnu`; the audit searches them only for files "
      "outside the store), then each name the caller asks (the facts' `asked` list, in order) "
      "is looked up folder by folder, first match wins, skipping files of another machine as "
      "glibc does. Agree: the audit's resolved file is glibc's, or both find nothing.")
    w("")
    w("| package | agree before | disagree before | agree after | disagree after | not checkable |")
    w("|---|---|---|---|---|---|")
    for r in results:
        ob, oa = r["oracle_before"], r["oracle_after"]
        if ob["agree"] + len(ob["disagree"]) + len(ob["skipped"]) + oa["agree"] + len(oa["disagree"]) + len(oa["skipped"]) == 0:
            continue
        w(f"| {r['pkg']['id']} | {ob['agree']} | {len(ob['disagree'])} | {oa['agree']} | "
          f"{len(oa['disagree'])} | {len(ob['skipped']) + len(oa['skipped'])} |")
    w("")
    if disagree:
        w("Every disagreement:")
        w("")
        w("| caller | target (asked) | audit says | glibc's search finds | caller's own folders |")
        w("|---|---|---|---|---|")
        for d in disagree:
            w(f"| `{short(d['caller'], store)}` | {d['soname']} ({', '.join(d['asked'])}) | "
              f"{d['check']}: {short(d['audit'], store)} | {short(d['glibc'], store)} | "
              f"{':'.join(short(x, store) for x in d['dirs']) or '(none)'} |")
    else:
        w("No disagreement.")
    w("")
    if skipped:
        w("Not checkable (callers this machine could not load, by reason):")
        w("")
        reasons_skip = Counter((s[4][:160], s[0]) for s in skipped)
        w("| package | why | findings |")
        w("|---|---|---|")
        for (why, pid), n in sorted(reasons_skip.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            w(f"| {pid} | {why.replace('|', '/').replace(store, '/nix/store')} | {n} |")
        w("")
    w("## Sources")
    w("")
    w("Wheels are pinned by sha256 in `benches/survey.sh`. Debian packages are taken as apt "
      "serves them (bookworm, its updates and security suites); *pinned* is the version the "
      "script was written against.")
    w("")
    w("| package | source | file | sha256 | pinned | why it is in the survey |")
    w("|---|---|---|---|---|---|")
    for p in pkgs:
        pinned = "same" if p["pinned"].split(" ")[-1] == p["sha"] else f"{p['pinned'].split(' ')[0]} (drifted)"
        w(f"| {p['pname']} {p['version']} | {p['source']} | `{os.path.basename(p['src'])}` | "
          f"`{p['sha'][:16]}…` | {pinned} | {p['why']} |")
    w("")
    fails = [(r["pkg"]["id"], which, a) for r in results for which, a in
             (("before", r["before"]), ("after", r["after"])) if a.rc == 2 or a.panic]
    fix_fails = [(r["pkg"]["id"], r["fix"]) for r in results if r["fix"]["rc"] != 0]
    if fails or fix_fails:
        w("## Failures")
        w("")
        for pid, which, a in fails:
            w(f"- {pid} ({which}): exit {a.rc}: "
              + "; ".join(x.replace(store, "/nix/store") for x in a.json.get("failures", []))[:600]
              + (" " + a.stderr.strip().replace(store, "/nix/store")[-400:] if a.panic else ""))
        for pid, fx in fix_fails:
            w(f"- {pid}: auto-add-driver-runpath exit {fx['rc']}: "
              f"{fx['stderr'].strip().replace(store, '/nix/store')[-400:]}")
        w("")
    with open(args.doc, "w") as f:
        f.write("\n".join(L))
    return dict(packages=len(results), files=files, med_b=med_b, med_a=med_a, agree=agree,
                disagree=len(disagree), skipped=len(skipped), longest=longest[0], panics=panics,
                exit2=exit2)


def main():
    ap = argparse.ArgumentParser()
    for opt in ("cache", "bin", "manifest", "caps", "commit", "reasons", "doc", "partial"):
        ap.add_argument("--" + opt, required=True)
    args = ap.parse_args()
    t0 = time.monotonic()
    inspect = os.path.join(args.bin, "cuda-elf-inspect")
    fixer = os.path.join(args.bin, "auto-add-driver-runpath")
    args.version = subprocess.run([inspect, "--version"], stdout=subprocess.PIPE,
                                  text=True).stdout.strip()
    helptext = subprocess.run([inspect, "--help"], stdout=subprocess.PIPE, text=True).stdout
    facts = "--dlopen-facts" in helptext
    pkgs = read_manifest(args.manifest)
    store = os.path.join(args.cache, "store", "nix", "store")
    os.makedirs(store, exist_ok=True)
    lay_out(pkgs, store)
    run = os.path.join(args.cache, "run")
    after_store = os.path.join(run, "after", "nix", "store")
    shutil.rmtree(os.path.join(run, "after"), ignore_errors=True)
    shutil.rmtree(os.path.join(run, "reports"), ignore_errors=True)
    os.makedirs(after_store)
    os.makedirs(os.path.join(run, "reports"))
    libcuda = [p for p in pkgs if p["id"] == "libcuda1"]
    oracle = Oracle(os.path.join(run, "survey-oracle"), run,
                    library_dirs(libcuda[0]["out"]) if libcuda else [])
    results = []
    for p in pkgs:
        stem = os.path.join(run, "reports", p["id"])
        before = Audit(inspect, args.caps, store, p["out"], stem + ".before", facts)
        after_out = os.path.join(after_store, p["name"])
        subprocess.run(["cp", "-a", p["out"], after_out], check=True)
        fx = fix(fixer, after_out)
        after = Audit(inspect, args.caps, after_store, after_out, stem + ".after", facts)
        p["out_used"] = p["out"]
        ob = check_dlopen(before, p, oracle, run)
        p["out_used"] = after_out
        oa = check_dlopen(after, p, oracle, run)
        print(f"survey.py: {p['id']}: {before.files} files, W {before.count('warning')} -> "
              f"{after.count('warning')}, exit {before.rc}/{after.rc}, fix exit {fx['rc']}, "
              f"oracle {ob['agree'] + oa['agree']} agree / {len(ob['disagree']) + len(oa['disagree'])} "
              f"disagree ({before.seconds:.1f} s)", file=sys.stderr)
        results.append(dict(pkg=p, before=before, after=after, fix=fx, oracle_before=ob,
                            oracle_after=oa))
        shutil.rmtree(after_out)
    args.seconds = time.monotonic() - t0
    s = write_doc(args, pkgs, store, results, read_reasons(args.reasons))
    print(f"survey: {s['packages']} packages, {s['files']} files, warnings/file median "
          f"{s['med_b']:.2f} before / {s['med_a']:.2f} after the fix, longest line {s['longest']}, "
          f"panics {s['panics']}, exit-2 {s['exit2']}, oracle {s['agree']} agree / "
          f"{s['disagree']} disagree / {s['skipped']} not checkable -> {args.doc}")


if __name__ == "__main__":
    main()
