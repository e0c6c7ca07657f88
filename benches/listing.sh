#!/usr/bin/env bash
# cuda-elf-inspect --list-elf/--list-ptx against cuobjdump: the listing section
# of compare.sh (libcublasLt.so.12 and the corpus folder). See BENCHMARKS.md.
exec bash "$(dirname "$0")/compare.sh" --only listing "$@"
