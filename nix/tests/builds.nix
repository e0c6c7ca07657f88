# The derivations nix/tests/run.sh really builds (one attribute per case;
# build-tests.sh says what each must do). Every build runs Nixpkgs' real
# default-builder.sh and setup.sh with the real default hooks (./lib.nix);
# the hooks come from nix/hooks.nix itself, built by the makeSetupHook
# stand-in of ./lib.nix.
{
  binDir,
  nixpkgs,
  patchelf,
  # A CUDA shared library built for sm_80 only (run.sh builds it with nvcc),
  # or null when nvcc is not installed.
  cudaFixture ? null,
}:
let
  t = import ./lib.nix { inherit binDir nixpkgs patchelf; };
  inherit (t) stdenv hooks makeSetupHook;

  nbs = hooks.noBrokenSymlinksHook;
  # The inspect hook joins the combined cases once it is merged and nvcc is there.
  withInspect = builtins.pathExists ../../hooks/cuda-elf-inspect.sh && cudaFixture != null;

  # A derivation whose installPhase runs `script` after creating the outputs
  # named in `make` (all outputs by default).
  withOutputs =
    name: attrs: script:
    stdenv.mkDerivation (
      {
        inherit name;
        dontUnpack = true;
        nativeBuildInputs = [ nbs ];
        installPhase = ''
          for o in $(getAllOutputNames); do
            case " ''${make:-$(getAllOutputNames)} " in
              *" $o "*) mkdir -p "''${!o}" ;;
            esac
          done
          ${script}
        '';
      }
      // attrs
    );

  danglingAbs = ''ln -s "$out/missing" "$out/dangling"'';

  # The same hook script packaged twice (as when two inputs propagate it).
  nbsAgain = makeSetupHook {
    name = "no-broken-symlinks-hook-again";
    substitutions.noBrokenSymlinks = "${t.nix-cuda-hooks}/bin/no-broken-symlinks";
  } ../../hooks/no-broken-symlinks.sh;

  # The hook with its placeholder left in.
  nbsUnsubstituted = makeSetupHook { name = "no-broken-symlinks-hook-raw"; } ../../hooks/no-broken-symlinks.sh;

  # ELF files for autoAddDriverRunpath, compiled by the host gcc.
  elfScript = ''
    mkdir -p "$out/bin" "$lib/lib"
    printf 'int foo(void) { return 42; }\n' >foo.c
    printf 'int main(void) { return 0; }\n' >main.c
    gcc -shared -fPIC -o "$lib/lib/libfoo.so" foo.c
    gcc -o "$out/bin/hello" main.c
  '';
  fakeCudaCompat = {
    outPath = "/nix/store/00000000000000000000000000000000-cuda_compat";
    meta = { };
  };
  withElf =
    name: attrs:
    stdenv.mkDerivation (
      {
        inherit name;
        dontUnpack = true;
        outputs = [
          "out"
          "lib"
        ];
        nativeBuildInputs = [ hooks.autoAddDriverRunpath ];
        installPhase = elfScript;
      }
      // attrs
    );

  # Nixpkgs' removeStubsFromRunpathHook from its own package.nix. Stand-ins:
  # arrayUtilities.getRunpathEntries packaged here (its package.nix is not
  # pinned) and addDriverRunpath.driverLink (the pinned addDriverRunpath
  # predates that attribute).
  removeStubsFromRunpathHook =
    import (t.upstream "pkgs/development/cuda-modules/packages/removeStubsFromRunpathHook/package.nix")
      {
        inherit makeSetupHook;
        inherit (t) autoFixElfFiles;
        addDriverRunpath = t.addDriverRunpath // {
          driverLink = "/run/opengl-driver";
        };
        arrayUtilities.getRunpathEntries = makeSetupHook {
          name = "getRunpathEntries";
          propagatedBuildInputs = [
            (makeSetupHook { name = "isDeclaredArray"; } (
              t.upstream "pkgs/build-support/setup-hooks/arrayUtilities/isDeclaredArray/isDeclaredArray.bash"
            ))
          ];
        } (t.upstream "pkgs/build-support/setup-hooks/arrayUtilities/getRunpathEntries/getRunpathEntries.bash");
      };

  # ELF files of every kind autoAddDriverRunpath decides on, in two outputs.
  # strip and patchelf stay out of it (dontStrip): the files differ only by
  # what the hook did.
  elfZoo =
    name: hookPackages:
    stdenv.mkDerivation {
      inherit name;
      dontUnpack = true;
      dontStrip = true;
      outputs = [
        "out"
        "lib"
      ];
      nativeBuildInputs = hookPackages;
      installPhase = ''
        mkdir -p "$out/bin" "$lib/lib"
        printf 'int foo(void) { return 42; }\n' >foo.c
        printf 'int main(void) { return 0; }\n' >main.c
        gcc -o "$out/bin/no-runpath" main.c
        gcc -o "$out/bin/with-runpath" main.c -Wl,--enable-new-dtags,-rpath,/opt/x/lib
        gcc -static -o "$out/bin/static" main.c
        gcc -static-pie -o "$out/bin/static-pie" main.c
        gcc -shared -fPIC -o "$lib/lib/libfoo.so" foo.c -Wl,--enable-new-dtags,-rpath,/opt/y/lib
        gcc -shared -fPIC -o "$lib/lib/libdriver-already.so" foo.c -Wl,--enable-new-dtags,-rpath,/run/opengl-driver/lib
        cp "$(readlink -f /lib64/ld-linux-x86-64.so.2)" "$lib/lib/ld-linux-x86-64.so.2"
        gcc -c -o "$lib/lib/object.o" foo.c
      '';
    };

  # autoAddDlopenRunpath: a library in one derivation, and a program in
  # another that dlopens it by soname with no RUNPATH to it (the plain
  # host gcc adds none).
  dlopenPlugin = stdenv.mkDerivation {
    name = "dlopen-plugin";
    dontUnpack = true;
    installPhase = ''
      mkdir -p "$out/lib"
      printf 'int plug_answer(void) { return 42; }\n' >plug.c
      gcc -shared -fPIC -Wl,-soname,libplug.so.1 -o "$out/lib/libplug.so.1" plug.c
    '';
  };
  dlopenAppSource = builtins.toFile "app.c" ''
    #include <dlfcn.h>
    #include <stdio.h>
    int main(void) {
      void *h = dlopen("libplug.so.1", RTLD_NOW);
      if (!h) { fprintf(stderr, "dlopen failed: %s\n", dlerror()); return 3; }
      int (*f)(void) = (int (*)(void))dlsym(h, "plug_answer");
      printf("answer %d\n", f());
      return 0;
    }
  '';
  # `plugin`: where the program's output puts the plugin ("": nowhere).
  dlopenApp =
    name: attrs:
    stdenv.mkDerivation (
      {
        inherit name;
        dontUnpack = true;
        nativeBuildInputs = [ hooks.autoAddDlopenRunpath ];
        buildInputs = [ dlopenPlugin ];
        installPhase = ''
          mkdir -p "$out/bin"
          gcc -o "$out/bin/app" ${dlopenAppSource}
          printf '%s\n' "''${postFixupHooks[@]}" >"$out/registered"
          runHook postInstall
        '';
      }
      // attrs
    );

  inspectHook =
    caps:
    hooks.mkCudaElfInspectHook {
      cudaCapabilities = caps;
      cudaForwardCompat = false;
      cudaVersion = "13.0";
    };
  # The fixture is built by the host's nvcc and gcc, so its libstdc++ and
  # libgcc_s live in the host's folders (--system-lib-dirs), and like every
  # CUDA package it gets the driver RUNPATH before the audit runs.
  withCuda =
    name: caps: attrs:
    stdenv.mkDerivation (
      {
        inherit name;
        dontUnpack = true;
        nativeBuildInputs = [
          hooks.autoAddDriverRunpath
          (inspectHook caps)
        ];
        cudaElfInspectFlags = "--system-lib-dirs";
        fixture = cudaFixture;
        installPhase = ''
          mkdir -p "$out/lib"
          cp "$fixture" "$out/lib/libkernel.so"
        '';
      }
      // attrs
    );
  # Build-only references (the cases below, cei-ref-*).
  refLeakDep = stdenv.mkDerivation {
    name = "leak-dep";
    dontUnpack = true;
    installPhase = ''mkdir -p "$out/bin" && echo tool >"$out/bin/tool"'';
  };
  refLeakDep2 = stdenv.mkDerivation {
    name = "leak-dep-two";
    dontUnpack = true;
    installPhase = ''mkdir -p "$out/bin" && echo tool >"$out/bin/tool"'';
  };
  refLeak =
    attrs:
    withCuda "cei-ref-leak" [ "8.0" ] (
      {
        leak = refLeakDep;
        installPhase = ''
          mkdir -p "$out/lib" "$out/share"
          cp "$fixture" "$out/lib/libkernel.so"
          printf 'tool=%s/bin/tool\n' "$leak" >"$out/share/leak.conf"
          for p in ''${leakMore-}; do printf 'more=%s\n' "$p" >>"$out/share/leak.conf"; done
        '';
      }
      // attrs
    );
  cei-ref-allowed = refLeak { };
  # The baseline, written outside a build's environment from the allowed
  # output, as a maintainer would from `result`.
  cei-ref-baseline = t.runCommand "cei-ref-baseline" { } ''
    env -i PATH="$PATH" NIX_STORE="$NIX_STORE" ${t.nix-cuda-hooks}/bin/cuda-elf-inspect \
      --system-lib-dirs --forbid-reference ${refLeakDep} --write-baseline "$out" ${cei-ref-allowed}
  '';
  # ---- one RUNPATH pass: a redist-like output, Nixpkgs' hook chain in every
  # order it supports against ours in every order (build-tests.sh,
  # test_one_runpath_pass). The ELF files are compiled once (redistSrc) and
  # copied into each build, so that every build starts from the same bytes.
  # Its `stubs` output is named like a CUDA package's stubs output
  # (`...-cuda12.8-...-stubs/lib`, removeStubsFromRunpath's second pattern).
  redistSrc = stdenv.mkDerivation {
    name = "cuda12.8-redistlike-src";
    dontUnpack = true;
    dontFixup = true;
    outputs = [
      "out"
      "stubs"
    ];
    installPhase = ''
      mkdir -p "$out/tree/bin" "$out/tree/lib" "$out/tree/plugins" "$stubs/lib"
      printf 'int cuInit(unsigned f) { return 100; }\n' >cuda.c
      printf 'int foo(void) { return 42; }\n' >foo.c
      printf 'int cuInit(unsigned); int foo(void) { return cuInit(0) == 100 ? 0 : foo(); }\n' >stubbed.c
      printf 'int foo(void); int main(void) { return foo() == 42 ? 0 : 1; }\n' >main.c
      printf 'int plug_answer(void) { return 42; }\n' >plug.c
      gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stubs/lib/libcuda.so" cuda.c
      t=$out/tree
      gcc -shared -fPIC -o "$t/lib/libfoo.so" foo.c -Wl,--enable-new-dtags,-rpath,'$ORIGIN'
      gcc -o "$t/bin/tool" main.c -L"$t/lib" -lfoo -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib'
      gcc -shared -fPIC -o "$t/lib/libstubbed.so" stubbed.c -Wl,--no-as-needed -L"$stubs/lib" -lcuda \
        -Wl,--enable-new-dtags,-rpath,"/opt/a:$stubs/lib:\$ORIGIN"
      gcc -o "$t/bin/stubbed-tool" main.c -Wl,--no-as-needed -L"$t/lib" -lfoo -L"$stubs/lib" -lcuda \
        -Wl,--enable-new-dtags,-rpath,"$stubs/lib:\$ORIGIN/../lib:/nix/store/00000000000000000000000000000000-cuda_nvml_dev-12.8/lib/stubs"
      gcc -shared -fPIC -o "$t/lib/libother-stubs.so" foo.c \
        -Wl,--enable-new-dtags,-rpath,/nix/store/00000000000000000000000000000000-nvidia-x11-stubs/lib
      gcc -shared -fPIC -o "$t/lib/libplain.so" foo.c
      gcc -o "$t/bin/dlopener" ${dlopenAppSource} -ldl
      gcc -shared -fPIC -Wl,-soname,libplug.so.1 -o "$t/plugins/libplug.so.1" plug.c
      gcc -static -o "$t/bin/static" ${builtins.toFile "static.c" "int main(void) { return 0; }"}
    '';
  };
  # Nixpkgs' autoAddCudaCompatRunpath from its own package.nix.
  upstreamCompatHook =
    import (t.upstream "pkgs/development/cuda-modules/packages/autoAddCudaCompatRunpath/package.nix")
      {
        inherit makeSetupHook;
        inherit (t) autoFixElfFiles;
        cuda_compat = fakeCudaCompat;
      };
  # `upstream`: Nixpkgs' chain, where the dlopen target's folder is added by
  # hand, as Nixpkgs' redist packages do (appendRunpaths, #549346).
  redistLike =
    name: upstream: hookPackages:
    stdenv.mkDerivation {
      name = "cuda12.8-redistlike-${name}";
      dontUnpack = true;
      dontStrip = true;
      outputs = [
        "out"
        "lib"
      ];
      NIX_DEBUG = 6;
      nativeBuildInputs = hookPackages;
      installPhase = ''
        mkdir -p "$out" "$lib/lib"
        cp -r ${redistSrc}/tree/bin ${redistSrc}/tree/lib "$out/"
        cp ${redistSrc}/tree/plugins/* "$lib/lib/"
        chmod -R u+w "$out" "$lib"
      '';
      postFixup = if upstream then ''patchelf --add-rpath "$lib/lib" "$out/bin/dlopener"'' else "";
    };
  oursCompatHook = hooks.mkAutoAddCudaCompatRunpath { cuda_compat = fakeCudaCompat; };
  # Every order of the three hooks: [ name hooks ].
  orders =
    named:
    let
      perms =
        xs:
        if xs == [ ] then
          [ [ ] ]
        else
          builtins.concatMap (
            x: map (rest: [ x ] ++ rest) (perms (builtins.filter (y: y != x) xs))
          ) xs;
    in
    map (p: {
      name = builtins.concatStringsSep "-" p;
      hooks = map (n: named.${n}) p;
    }) (perms (builtins.attrNames named));
  upstreamOrders = orders {
    driver = t.upstreamAutoAddDriverRunpath;
    compat = upstreamCompatHook;
    stubs = removeStubsFromRunpathHook;
  };
  oursOrders = orders {
    driver = hooks.autoAddDlopenRunpath;
    compat = oursCompatHook;
    stubs = removeStubsFromRunpathHook;
  };

in
{
  inherit (t) nix-cuda-hooks;
  hook = nbs;

  # ---- what the hooks rely on in Nixpkgs' setup.sh ---------------------------
  # Order: phases, preFixup, fixupOutput per output, the derivation's postFixup
  # string, then the registered entries (a function, a string to eval).
  setup-order = stdenv.mkDerivation {
    name = "setup-order";
    dontUnpack = true;
    outputs = [
      "out"
      "dev"
    ];
    nativeBuildInputs = [ (makeSetupHook { name = "probe-hook"; } ./probe-hook.sh) ];
    NIX_DEBUG = 3;
    buildPhase = ''mkdir -p "$out" "$dev"; echo build >"$out/order"'';
    preInstall = ''echo preInstall >>"$out/order"'';
    preFixup = ''echo preFixup >>"$out/order"'';
    postFixup = ''
      echo postFixup >>"$out/order"
      nixInfoLog "info from the derivation's postFixup"
    '';
  };
  setup-order-sa = stdenv.mkDerivation {
    name = "setup-order-sa";
    dontUnpack = true;
    __structuredAttrs = true;
    outputs = [
      "out"
      "dev"
    ];
    nativeBuildInputs = [ (makeSetupHook { name = "probe-hook"; } ./probe-hook.sh) ];
    buildPhase = ''mkdir -p "$out" "$dev"; echo build >"$out/order"'';
    postFixup = ''echo "outputs: $(getAllOutputNames | tr ' ' '\n' | sort | tr '\n' ' ')" >>"$out/order"'';
  };

  # ---- noBrokenSymlinks -------------------------------------------------------
  nbs-dangling-absolute = withOutputs "nbs-dangling-absolute" { } danglingAbs;
  nbs-dangling-relative = withOutputs "nbs-dangling-relative" { } ''
    mkdir -p "$out/lib"
    ln -s ../missing "$out/lib/dangling"
  '';
  nbs-reflexive = withOutputs "nbs-reflexive" { } ''ln -s "$out/self" "$out/self"'';
  nbs-both = withOutputs "nbs-both" { } ''
    ln -s "$out/missing" "$out/dangling"
    ln -s self "$out/self"
  '';
  nbs-tmpdir = withOutputs "nbs-tmpdir" { } ''
    touch "$TMPDIR/file"
    ln -s "$TMPDIR/file" "$out/to-build-dir"
  '';
  nbs-valid = withOutputs "nbs-valid" { } ''
    mkdir -p "$out/lib"
    touch "$out/lib/file"
    ln -s file "$out/lib/relative"
    ln -s "$out/lib/file" "$out/absolute"
    ln -s lib "$out/dir-link"
  '';
  nbs-outside-store = withOutputs "nbs-outside-store" { } ''
    ln -s /etc/my_file "$out/absolute"
    ln -s ../../../../../../../../../../etc/my_file "$out/relative"
  '';
  nbs-opt-out = withOutputs "nbs-opt-out" { dontCheckForBrokenSymlinks = true; } danglingAbs;
  nbs-opt-out-false = withOutputs "nbs-opt-out-false" { dontCheckForBrokenSymlinks = false; } danglingAbs;
  # Links made in postFixup are checked: the hook runs after it.
  nbs-made-in-postfixup = withOutputs "nbs-made-in-postfixup" {
    postFixup = danglingAbs;
  } "";
  nbs-multiple-outputs = withOutputs "nbs-multiple-outputs" {
    outputs = [
      "out"
      "dev"
      "lib"
    ];
    NIX_DEBUG = 3;
  } ''ln -s "$lib/missing" "$lib/dangling"'';
  # Two outputs with broken links: the build stops after the first (upstream).
  nbs-stops-at-first-output = withOutputs "nbs-stops-at-first-output" {
    outputs = [
      "out"
      "dev"
    ];
  } ''
    ln -s "$out/missing" "$out/dangling"
    ln -s "$dev/missing" "$dev/dangling"
  '';
  nbs-logs-info = withOutputs "nbs-logs-info" { NIX_DEBUG = 3; } ''
    touch "$out/file"
    ln -s file "$out/link"
  '';
  nbs-sourced-twice = withOutputs "nbs-sourced-twice" {
    nativeBuildInputs = [
      nbs
      nbsAgain
    ];
    NIX_DEBUG = 3;
    # The derivation's own postFixup runs before the registered hooks.
    postFixup = ''echo "''${postFixupHooks[*]}" >"$out/registered"'';
  } "";
  nbs-unsubstituted = withOutputs "nbs-unsubstituted" { nativeBuildInputs = [ nbsUnsubstituted ]; } "";
  # Not "dev": Nixpkgs' multiple-outputs.sh creates dev/nix-support itself.
  nbs-missing-output = withOutputs "nbs-missing-output" {
    outputs = [
      "out"
      "doc"
    ];
    make = "out";
    NIX_DEBUG = 1;
  } "";

  # ---- noBrokenSymlinks with structured attributes ---------------------------
  nbs-sa-dangling = withOutputs "nbs-sa-dangling" { __structuredAttrs = true; } danglingAbs;
  nbs-sa-opt-out = withOutputs "nbs-sa-opt-out" {
    __structuredAttrs = true;
    dontCheckForBrokenSymlinks = true;
  } danglingAbs;
  nbs-sa-valid = withOutputs "nbs-sa-valid" { __structuredAttrs = true; } ''
    touch "$out/file"
    ln -s file "$out/link"
  '';
  nbs-sa-multiple-outputs = withOutputs "nbs-sa-multiple-outputs" {
    __structuredAttrs = true;
    outputs = [
      "out"
      "dev"
      "lib"
    ];
  } ''ln -s "$dev/missing" "$dev/dangling"'';
  nbs-sa-without-json = withOutputs "nbs-sa-without-json" {
    __structuredAttrs = true;
    preFixup = ''rm -f "$NIX_ATTRS_JSON_FILE"'';
  } "";

  # ---- stdenv precedence: setup.sh sources the defaults LAST -------------------
  # Ours in nativeBuildInputs is sourced before the stdenv's own
  # no-broken-symlinks.sh, registers, and sets the guard that makes the
  # upstream file skip: ours decides. `registered` names the function's code.
  nbs-stdenv-nativeBuildInputs-only = stdenv.mkDerivation {
    name = "nbs-stdenv-nativeBuildInputs-only";
    dontUnpack = true;
    nativeBuildInputs = [ nbs ];
    NIX_DEBUG = 3;
    installPhase = ''mkdir -p "$out"; ${danglingAbs}'';
  };
  nbs-stdenv-which = stdenv.mkDerivation {
    name = "nbs-stdenv-which";
    dontUnpack = true;
    nativeBuildInputs = [ nbs ];
    installPhase = ''mkdir -p "$out"'';
    postFixup = ''declare -f noBrokenSymlinksInAllOutputs >"$out/registered"'';
  };
  # Propagated by an input (a library carrying our hook): ours decides too.
  nbs-stdenv-propagated = stdenv.mkDerivation {
    name = "nbs-stdenv-propagated";
    dontUnpack = true;
    nativeBuildInputs = [
      (makeSetupHook {
        name = "a-library-propagating-the-hook";
        propagatedBuildInputs = [ nbs ];
      } (builtins.toFile "empty-hook.sh" ""))
    ];
    installPhase = ''mkdir -p "$out"'';
    postFixup = ''declare -f noBrokenSymlinksInAllOutputs >"$out/registered"'';
  };
  # Without ours: Nixpkgs' own hook decides (the stdenv's default).
  nbs-stdenv-upstream = stdenv.mkDerivation {
    name = "nbs-stdenv-upstream";
    dontUnpack = true;
    installPhase = ''mkdir -p "$out"'';
    postFixup = ''declare -f noBrokenSymlinksInAllOutputs >"$out/registered"'';
  };
  # hooks.withNoBrokenSymlinksHook: ours for every derivation of the stdenv.
  nbs-stdenv-adapter = (hooks.withNoBrokenSymlinksHook stdenv).mkDerivation {
    name = "nbs-stdenv-adapter";
    dontUnpack = true;
    NIX_DEBUG = 3;
    installPhase = ''mkdir -p "$out"; ${danglingAbs}'';
  };

  # ---- Nixpkgs' own test cases (pkgs/test/stdenv/no-broken-symlinks.nix) ----
  # Read from the file, not retyped: run.sh builds every attribute. With ours
  # through the stdenv adapter, and with the plain stdenv (Nixpkgs' own hook),
  # which checks the harness itself.
  upstream-cases-ours = import (t.upstream "pkgs/test/stdenv/no-broken-symlinks.nix") {
    inherit (t) lib pkgs;
    stdenv = hooks.withNoBrokenSymlinksHook stdenv;
  };
  upstream-cases-upstream = import (t.upstream "pkgs/test/stdenv/no-broken-symlinks.nix") {
    inherit (t) lib pkgs stdenv;
  };

  # ---- autoAddDriverRunpath (built when hooks/auto-add-driver-runpath.sh exists)
  aadr-elf = withElf "aadr-elf" { };
  aadr-opt-out = withElf "aadr-opt-out" { dontUseAutoAddDriverRunpath = true; };
  aadr-sa = withElf "aadr-sa" { __structuredAttrs = true; };
  # The fast wrapper with its placeholder left in.
  aadr-unsubstituted = withElf "aadr-unsubstituted" {
    nativeBuildInputs = [
      (makeSetupHook {
        name = "auto-add-driver-runpath-raw";
        propagatedBuildInputs = [
          t.addDriverRunpath
          t.autoFixElfFiles
          (makeSetupHook { name = "auto-fix-elf-files-driver-runpath-raw"; } ../../hooks/auto-fix-elf-files-driver-runpath.sh)
        ];
      } ../../hooks/auto-add-driver-runpath.sh)
    ];
  };
  aadr-sourced-twice = withElf "aadr-sourced-twice" {
    nativeBuildInputs = [
      hooks.autoAddDriverRunpath
      (makeSetupHook {
        name = "auto-add-driver-runpath-hook-again";
        propagatedBuildInputs = [ hooks.autoFixElfFilesDriverRunpath ];
      } ../../hooks/auto-add-driver-runpath.sh)
    ];
    postFixup = ''
      printf '%s\n' "''${postFixupHooks[@]}" >"$out/registered"
      printf '%s\n' "''${nixCudaHooksRunpathFixes[@]}" >"$out/folded"
    '';
  };
  # The lib output is never created: upstream's hook fails after patching the rest.
  aadr-missing-output = withElf "aadr-missing-output" {
    installPhase = ''
      mkdir -p "$out/bin"
      printf 'int main(void) { return 0; }\n' >main.c
      gcc -o "$out/bin/hello" main.c
    '';
  };
  aadr-sa-without-json = withElf "aadr-sa-without-json" {
    __structuredAttrs = true;
    preFixup = ''rm -f "$NIX_ATTRS_JSON_FILE"'';
  };
  # All hooks in upstream order: noBrokenSymlinks (a stdenv default, sourced
  # first), then autoAddDriverRunpath, then the inspect hook when present.
  together = withElf "together" (
    {
      nativeBuildInputs = [
        nbs
        hooks.autoAddDriverRunpath
      ]
      ++ (if withInspect then [ (inspectHook [ "8.0" ]) ] else [ ]);
      postFixup = ''echo "''${postFixupHooks[*]}" >"$out/registered"'';
    }
    // (
      if withInspect then
        {
          cudaElfInspectFlags = "--system-lib-dirs";
          fixture = cudaFixture;
          installPhase = elfScript + ''cp "$fixture" "$lib/lib/libkernel.so"'';
        }
      else
        { }
    )
  );
  together-dangling = withElf "together-dangling" {
    nativeBuildInputs = [
      nbs
      hooks.autoAddDriverRunpath
    ];
    installPhase = elfScript + danglingAbs;
  };

  # ---- autoAddDriverRunpath as a drop-in among Nixpkgs' own hooks -------------
  # The functions upstream's hook propagates exist, and a derivation's own
  # "autoFixElfFiles myAction" runs Nixpkgs' autoFixElfFiles, per file.
  aadr-functions = withElf "aadr-functions" {
    preFixup = ''
      declare -F autoFixElfFiles addDriverRunpath elfHasDynamicSection >"$out/functions"
      myAction() { echo "$1" >>"$out/my-action"; }
      postFixupHooks+=("autoFixElfFiles myAction")
    '';
    postFixup = ''
      printf '%s\n' "''${postFixupHooks[@]}" >"$out/registered"
      printf '%s\n' "''${nixCudaHooksRunpathFixes[@]}" >"$out/folded"
    '';
  };
  # A derivation calling Nixpkgs' addDriverRunpath function by hand.
  aadr-by-hand = withElf "aadr-by-hand" {
    dontUseAutoAddDriverRunpath = true;
    postFixup = ''addDriverRunpath "$out/bin/hello"'';
  };
  # Nixpkgs' removeStubsFromRunpathHook (its own package.nix and script)
  # finds our entry by its exact string, and its own "autoFixElfFiles
  # removeStubsFromRunpath" still runs Nixpkgs' autoFixElfFiles.
  aadr-remove-stubs = withElf "aadr-remove-stubs" {
    nativeBuildInputs = [
      hooks.autoAddDriverRunpath
      removeStubsFromRunpathHook
    ];
    installPhase = elfScript + ''
      gcc -shared -fPIC -o "$lib/lib/libstubbed.so" foo.c -Wl,-rpath,/nix/store/x-cuda_cudart-stubs/lib/stubs
    '';
  };

  # ---- autoAddCudaCompatRunpath (ours), after the driver hook as buildRedist
  # lists them; a cuda_compat stand-in (only its path matters here).
  compat-elf = withElf "compat-elf" {
    nativeBuildInputs = [
      hooks.autoAddDriverRunpath
      (hooks.mkAutoAddCudaCompatRunpath { cuda_compat = fakeCudaCompat; })
    ];
    postFixup = ''
      printf '%s\n' "''${postFixupHooks[@]}" >"$out/registered"
      printf '%s\n' "''${nixCudaHooksRunpathFixes[@]}" >"$out/folded"
    '';
  };
  # From buildInputs: upstream's guard (hostOffset -1, targetOffset 0) returns.
  compat-build-inputs = withElf "compat-build-inputs" {
    buildInputs = [ (hooks.mkAutoAddCudaCompatRunpath { cuda_compat = fakeCudaCompat; }) ];
    postFixup = ''
      printf '%s\n' "''${postFixupHooks[@]}" >"$out/registered"
      printf '%s\n' "''${nixCudaHooksRunpathFixes[@]}" >"$out/folded"
    '';
  };

  # ---- side by side: Nixpkgs' autoAddDriverRunpath chain vs ours --------------
  # The same ELF files (run.sh compares their RUNPATHs file by file): built
  # with neither hook, with Nixpkgs' (auto-fix-elf-files.sh + addDriverRunpath
  # + patchelf 0.19 from the stdenv), and with ours.
  side-none = elfZoo "side-none" [ ];
  side-upstream = elfZoo "side-upstream" [ t.upstreamAutoAddDriverRunpath ];
  side-ours = elfZoo "side-ours" [ hooks.autoAddDriverRunpath ];

  # The redist-like output's ELF files before any hook, and each order of
  # Nixpkgs' hooks and of ours over them.
  redistSrcOut = redistSrc;
  onePass = builtins.listToAttrs (
    map (o: {
      name = "upstream-${o.name}";
      value = redistLike "upstream-${o.name}" true o.hooks;
    }) upstreamOrders
    ++ map (o: {
      name = "ours-${o.name}";
      value = redistLike "ours-${o.name}" false o.hooks;
    }) oursOrders
  );

  # ---- cudaElfInspectHook (built when hooks/cuda-elf-inspect.sh, the binary and nvcc exist)
  cei-wrong-capability = withCuda "cei-wrong-capability" [ "9.0" ] { };
  cei-warn-only = withCuda "cei-warn-only" [ "9.0" ] { cudaElfInspectWarnOnly = true; };
  cei-right-capability = withCuda "cei-right-capability" [ "8.0" ] { };
  cei-derivation-overrides = withCuda "cei-derivation-overrides" [ "9.0" ] { cudaCapabilities = "8.0"; };
  cei-opt-out = withCuda "cei-opt-out" [ "9.0" ] { dontInspectCudaElfFiles = true; };
  cei-sa-wrong-capability = withCuda "cei-sa-wrong-capability" [ "9.0" ] { __structuredAttrs = true; };
  cei-sourced-twice = withCuda "cei-sourced-twice" [ "8.0" ] {
    nativeBuildInputs = [
      hooks.autoAddDriverRunpath
      (inspectHook [ "8.0" ])
      (hooks.mkCudaElfInspectHook {
        cudaCapabilities = [ "8.0" ];
        cudaForwardCompat = true;
        cudaVersion = "13.0";
      })
    ];
    postFixup = ''
      printf '%s\n' "''${postFixupHooks[@]}" >"$out/registered"
      printf '%s\n' "''${nixCudaHooksRunpathFixes[@]}" >"$out/folded"
    '';
  };
  cei-unsubstituted = withCuda "cei-unsubstituted" [ "8.0" ] {
    nativeBuildInputs = [ (makeSetupHook { name = "cuda-elf-inspect-hook-raw"; } ../../hooks/cuda-elf-inspect.sh) ];
  };
  cei-sa-without-json = withCuda "cei-sa-without-json" [ "8.0" ] {
    # The inspect hook alone, so that its own message is the one checked.
    nativeBuildInputs = [ (inspectHook [ "8.0" ]) ];
    __structuredAttrs = true;
    preFixup = ''rm -f "$NIX_ATTRS_JSON_FILE"'';
  };

  # Listed BEFORE Nixpkgs' removeStubsFromRunpathHook, which registers its
  # RUNPATH fix in a prePhase: the inspect entry still ends up last.
  cei-after-remove-stubs = withCuda "cei-after-remove-stubs" [ "8.0" ] {
    nativeBuildInputs = [
      hooks.autoAddDriverRunpath
      (inspectHook [ "8.0" ])
      removeStubsFromRunpathHook
    ];
    postFixup = ''
      printf '%s\n' "''${postFixupHooks[@]}" >"$out/registered"
      printf '%s\n' "''${nixCudaHooksRunpathFixes[@]}" >"$out/folded"
    '';
  };

  # ---- build-only references (docs/references.md) -----------------------------
  # An output whose text file names a dependency's store path: the hook fails
  # the build when that path is forbidden (cudaElfInspectForbidReferences, or
  # Nix's disallowedReferences), and a baseline made from the allowed build
  # with --write-baseline lets exactly that reference pass (the ratchet);
  # one more forbidden reference still fails. Every variant has the same
  # name, so that the baseline's locations (the store hash stripped) match.
  inherit cei-ref-allowed;
  cei-ref-forbidden = refLeak { cudaElfInspectForbidReferences = [ refLeakDep ]; };
  cei-ref-disallowed = refLeak { disallowedReferences = [ refLeakDep ]; };
  inherit cei-ref-baseline;
  cei-ref-ratchet = refLeak {
    cudaElfInspectForbidReferences = [ refLeakDep ];
    cudaElfInspectBaseline = cei-ref-baseline;
  };
  cei-ref-ratchet-new = refLeak {
    leakMore = [ refLeakDep2 ];
    cudaElfInspectForbidReferences = [
      refLeakDep
      refLeakDep2
    ];
    cudaElfInspectBaseline = cei-ref-baseline;
  };

  # ---- autoAddDlopenRunpath ---------------------------------------------------
  # The negative control: the driver hook alone leaves the program unable to
  # find the library it dlopens.
  dlopen-driver-only = dlopenApp "dlopen-driver-only" { nativeBuildInputs = [ hooks.autoAddDriverRunpath ]; };
  # From buildInputs (host platform), as autoPatchelfHook gathers them.
  dlopen-inputs = dlopenApp "dlopen-inputs" { };
  # Named by the derivation, not an input.
  dlopen-named = dlopenApp "dlopen-named" {
    buildInputs = [ ];
    dlopenSearchPath = [ "${dlopenPlugin}/lib" ];
  };
  dlopen-named-sa = dlopenApp "dlopen-named-sa" {
    __structuredAttrs = true;
    buildInputs = [ ];
    dlopenSearchPath = [ "${dlopenPlugin}/lib" ];
  };
  # addDlopenSearchPath in a phase, over a tree (recursive).
  dlopen-added = dlopenApp "dlopen-added" {
    buildInputs = [ ];
    preFixup = ''addDlopenSearchPath ${dlopenPlugin}'';
  };
  # The library in another output of the same derivation.
  dlopen-own-output = dlopenApp "dlopen-own-output" {
    buildInputs = [ ];
    outputs = [
      "out"
      "lib"
    ];
    postInstall = ''
      mkdir -p "$lib/lib/plugins"
      cp ${dlopenPlugin}/lib/libplug.so.1 "$lib/lib/plugins/"
    '';
  };
  dlopen-opt-out = dlopenApp "dlopen-opt-out" { dontUseAutoAddDlopenRunpath = true; };
  # A folder that does not exist: the build fails naming it.
  dlopen-missing-folder = dlopenApp "dlopen-missing-folder" {
    buildInputs = [ ];
    dlopenSearchPath = [ "/nonexistent/dlopen/lib" ];
  };

  # ---- nix/audit.nix (built when the cuda-elf-inspect binary exists) ---------
  audit-fixture = t.audit {
    package = withCuda "audit-target" [ "8.0" ] { nativeBuildInputs = [ hooks.autoAddDriverRunpath ]; };
    cudaCapabilities = [ "8.0" ];
    extraFlags = [ "--system-lib-dirs" ];
  };
  audit-fixture-findings = t.audit {
    package = withCuda "audit-target" [ "8.0" ] { nativeBuildInputs = [ hooks.autoAddDriverRunpath ]; };
    cudaCapabilities = [ "9.0" ];
    extraFlags = [ "--system-lib-dirs" ];
  };
  # audit.set over three packages (device code; a name full of markup; no
  # device code): its `_index` builds every audit and links each report.
  audit-set =
    (t.audit.set {
      packages = {
        kernels = withCuda "audit-kernels" [ "8.0" ] { nativeBuildInputs = [ hooks.autoAddDriverRunpath ]; };
        "odd <b>&\"name'" = withCuda "audit-odd" [ "8.0" ] {
          nativeBuildInputs = [ hooks.autoAddDriverRunpath ];
        };
        plain = stdenv.mkDerivation {
          name = "audit-plain";
          dontUnpack = true;
          installPhase = ''mkdir -p "$out/share" && echo text >"$out/share/readme"'';
        };
      };
      cudaCapabilities = [
        "8.0"
        "9.0"
      ];
      extraFlags = [ "--system-lib-dirs" ];
    })._index;
  audit-fixture-strict = t.audit {
    package = withCuda "audit-target" [ "8.0" ] { nativeBuildInputs = [ hooks.autoAddDriverRunpath ]; };
    cudaCapabilities = [ "9.0" ];
    extraFlags = [ "--system-lib-dirs" ];
    failOnFindings = true;
  };

  # ---- cudaPreflightHook (issue 32) --------------------------------------------
  # A gpuCheck-style derivation: a test that would run GPU code in its check
  # phase, in the sandbox of a machine without a GPU (this one). The hook
  # must stop the build before the tests, with the reason.
  preflight-gpucheck = stdenv.mkDerivation {
    name = "preflight-gpucheck";
    dontUnpack = true;
    nativeBuildInputs = [ hooks.cudaPreflightHook ];
    doCheck = true;
    buildPhase = ''mkdir -p "$out/bin"; echo build >"$out/log"'';
    # As every check phase of Nixpkgs is written (pytestCheckHook's too).
    checkPhase = ''
      runHook preCheck
      echo "GPU TESTS RAN" >&2
      runHook postCheck
    '';
    installPhase = "true";
  };
  # With structured attributes (outputs an associative array): the outputs
  # are still handed over as the closure.
  preflight-sa = stdenv.mkDerivation {
    name = "preflight-sa";
    __structuredAttrs = true;
    dontUnpack = true;
    nativeBuildInputs = [ hooks.cudaPreflightHook ];
    doCheck = true;
    buildPhase = ''mkdir -p "$out/bin"'';
    checkPhase = ''
      runHook preCheck
      echo "GPU TESTS RAN" >&2
      runHook postCheck
    '';
    installPhase = "true";
  };
  # The same, turned off as the other hooks are.
  preflight-off = stdenv.mkDerivation {
    name = "preflight-off";
    dontUnpack = true;
    nativeBuildInputs = [ hooks.cudaPreflightHook ];
    dontCudaPreflight = true;
    doCheck = true;
    buildPhase = ''mkdir -p "$out"'';
    # As every check phase of Nixpkgs is written (pytestCheckHook's too).
    checkPhase = ''
      runHook preCheck
      echo "GPU TESTS RAN" >&2
      runHook postCheck
    '';
    installPhase = "true";
  };
  # Through installCheck (how passthru.gpuCheck of Python packages runs
  # pytest), with a flag for the GPUs' capability.
  preflight-installcheck = stdenv.mkDerivation {
    name = "preflight-installcheck";
    dontUnpack = true;
    nativeBuildInputs = [ hooks.cudaPreflightHook ];
    cudaPreflightFlags = [
      "--gpu-capability"
      "8.6"
    ];
    doInstallCheck = true;
    installPhase = ''mkdir -p "$out"'';
    installCheckPhase = ''
      runHook preInstallCheck
      echo "GPU TESTS RAN" >&2
      runHook postInstallCheck
    '';
  };
}
