//! Fuzz target: the capability-list parser and the checks run on its result
//! (`parse_list`, `Capability::parse`, `CudaVersion::parse`, `validate`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::cuda::capabilities::{self, Capability, CudaVersion};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = Capability::parse(text);
    let cuda = CudaVersion::parse(text.split_whitespace().next().unwrap_or(""));
    if let Ok(req) = capabilities::parse_list(text) {
        for c in &req.capabilities {
            // Display and re-parse agree.
            let shown = c.to_string();
            assert_eq!(Capability::parse(&shown.to_ascii_lowercase()), Some(*c), "{shown}");
            let _ = capabilities::info(*c);
        }
        let cuda = cuda.unwrap_or_else(|| CudaVersion::parse("12.8").unwrap());
        let _ = capabilities::validate(&req.capabilities, cuda, "x86_64-linux");
        let _ = capabilities::validate_versions(&req.capabilities, Some(cuda));
        let _ = capabilities::default_capabilities(cuda);
    }
});
