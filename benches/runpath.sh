#!/usr/bin/env bash
# autoAddDriverRunpath against patchelf: the runpath section of compare.sh
# (1,000 small ELF files and libcublasLt.so.12, both modes). See BENCHMARKS.md.
exec bash "$(dirname "$0")/compare.sh" --only runpath "$@"
