//! Fuzz target: the NAR reader, the narinfo parser and the decompressors
//! (the zstd frame walk and window check, xz and bzip2 with their bounds),
//! the parsers of what a binary cache serves. Properties: no panic; every path the reader
//! yields is made of plain names (nothing can name a place outside the
//! archive's root); a regular file never yields more bytes than it declared;
//! a narinfo that parses has a store path in the store and a relative URL.
#![no_main]

use std::io::Read;
use std::path::Component;

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::store::decompress::decompressor;
use nix_cuda_hooks::store::nar::{EntryKind, NarReader, MAX_DEPTH};
use nix_cuda_hooks::store::narinfo::{Compression, NarInfo};

fuzz_target!(|data: &[u8]| {
    let mut reader = NarReader::new(data);
    while let Ok(Some(entry)) = reader.next_entry() {
        assert!(entry.path.components().all(|c| matches!(c, Component::Normal(_))));
        assert!(entry.path.components().count() <= MAX_DEPTH);
        if let EntryKind::Regular { size, .. } = entry.kind {
            let mut buf = [0u8; 4096];
            let mut total = 0u64;
            while let Ok(n) = reader.contents().read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            assert!(total <= size);
        }
    }
    // The same bytes as a compressed stream of each kind: no panic, and no
    // more history kept than the bound (a hostile window or dictionary is
    // an error); output read up to 16 MiB so a bomb is not a timeout.
    for compression in [Compression::Zstd, Compression::Xz, Compression::Bzip2] {
        let Ok(stream) = decompressor(&compression, Box::new(std::io::Cursor::new(data.to_vec())))
        else {
            panic!("{compression:?} is supported");
        };
        let mut out = stream.take(16 << 20);
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(info) = NarInfo::parse(text, "/nix/store") {
            assert!(info.store_path.starts_with("/nix/store/"));
            assert!(!info.url.starts_with('/') && !info.url.split('/').any(|c| c == ".."));
            let _ = info.fingerprint("/nix/store");
            let _ = info.verify("/nix/store", &[]);
        }
    }
});
