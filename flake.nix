{
  description = "repro: reproducible GPU-kernel work (fingerprints, hermetic builds, bisection, replay)";

  # nixpkgs is pinned in flake.lock to nixos-25.11 at 8fd9daa3db09ced9700431c5b7ad0e8ba199b575
  # (lastModified 1778430510, 2026-05-10), with narHash
  # sha256-Ti+ZBvW6yrWWAg2szExVTwCd4qOJ3KlVr1tFHfyfi8Q=: the revision and hash that public
  # flake.lock files record for that release branch (this project's machines cannot fetch
  # nixpkgs, so the pin was taken from those records, not made by `nix flake lock` here).
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: builtins.listToAttrs (map (system: { name = system; value = f system; }) systems);

      # CUDA is unfree: allow exactly NVIDIA's CUDA redistributables, nothing else.
      isCuda = pkg:
        let name = pkg.pname or (builtins.parseDrvName (pkg.name or "")).name;
        in builtins.substring 0 5 name == "cuda_" || builtins.substring 0 5 name == "cuda-"
           || builtins.substring 0 5 name == "libnv";

      pkgsFor = system: import nixpkgs {
        inherit system;
        config.allowUnfreePredicate = isCuda;
      };
    in
    {
      packages = forAllSystems (system:
        let pkgs = pkgsFor system; in {
          # repro itself, from Cargo.lock. Its tests need git, NVRTC and throwaway repositories;
          # CI runs them (`.ci/run`), so the package build does not.
          default = pkgs.rustPlatform.buildRustPackage {
            pname = "repro";
            version = "0.1.0";
            src = self;
            cargoLock.lockFile = ./Cargo.lock;
            doCheck = false;
            meta.mainProgram = "repro";
          };
        });

      apps = forAllSystems (system: {
        default = {
          type = "app";
          program = "${self.packages.${system}.default}/bin/repro";
        };
      });

      devShells = forAllSystems (system:
        let
          pkgs = pkgsFor system;
          # The CUDA 13.0 package set of the pinned nixpkgs (see the README for its patch release).
          cuda = pkgs.cudaPackages_13_0;
        in {
          default = pkgs.mkShell {
            name = "repro-dev";
            packages = [
              pkgs.rustc pkgs.cargo pkgs.clippy pkgs.rustfmt
              pkgs.git pkgs.python3
              # nvcc alone has no runtime headers: cuda_runtime.h comes from cuda_cudart, and
              # <cub/...>, <thrust/...>, <cuda/...> from CCCL.
              cuda.cuda_nvcc cuda.cuda_cudart cuda.cuda_cccl
            ];
            # nvcc looks for headers beside itself; nixpkgs splits CUDA into one package per
            # component, so the shell points nvcc at the others' include directories.
            NVCC_PREPEND_FLAGS = "-I${pkgs.lib.getInclude cuda.cuda_cudart}/include -I${pkgs.lib.getInclude cuda.cuda_cccl}/include";
            # Builds use the shell's NVRTC through this variable. There is deliberately no
            # LD_LIBRARY_PATH: a global one would shadow the host's libcuda, and the driver
            # always comes from the host (repro env check verifies it).
            REPRO_NVRTC = "${cuda.cuda_nvrtc.lib}/lib";
            REPRO_NVCC = "${cuda.cuda_nvcc}/bin/nvcc";
            CUDA_HOME = "${cuda.cuda_nvcc}";
            shellHook = ''
              if [ -n "''${REPRO_NIX_VERBOSE-}" ]; then
                echo "repro dev shell: nvcc $REPRO_NVCC, NVRTC in $REPRO_NVRTC" >&2
              fi
            '';
          };
        });
    };
}
