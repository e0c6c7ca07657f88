//! Fuzz target: `driver_runpath::search::printf_matches`, which matches a
//! printf pattern from a `dlopen` caller against the names of a search
//! folder (issue 29: it backtracked exponentially). The input is a pattern,
//! a NUL, and a name. Properties: no panic; the answer is the one of the
//! definition (every way of giving each conversion one or more bytes,
//! tried in turn: exponential, so only for patterns of at most 4
//! conversions and names of at most 32 bytes); a name made from the
//! pattern by giving each conversion a text it accepts matches; and the
//! match takes no more than a few hundred steps per (name byte x pattern
//! byte) (libFuzzer's -timeout catches a slow one).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::driver_runpath::search::printf_matches;

fuzz_target!(|data: &[u8]| {
    let (pattern, name) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    let got = printf_matches(pattern, name);
    let conversions = pattern.iter().filter(|&&b| b == b'%').count();
    if conversions <= 4 && name.len() <= 32 {
        assert_eq!(got, definition(pattern, name), "{pattern:?} {name:?}");
    }
    if let Some(made) = produce(pattern, name) {
        assert!(printf_matches(pattern, &made), "{pattern:?} does not match {made:?}");
    }
});

/// The definition: each conversion takes one or more accepted bytes, every
/// length tried.
fn definition(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'%', rest)) => {
            let Some(at) = rest.iter().position(|b| !b"0123456789-+ #.lhzjt".contains(b)) else {
                return false;
            };
            let after = &rest[at + 1..];
            let accept: fn(u8) -> bool = match rest[at] {
                b'%' => return name.first() == Some(&b'%') && definition(after, &name[1..]),
                b'd' | b'i' | b'u' => |b| b.is_ascii_digit(),
                b'x' | b'X' => |b| b.is_ascii_hexdigit(),
                b's' => |b| b != b'/',
                _ => return false,
            };
            (1..=name.len()).take_while(|&n| accept(name[n - 1])).any(|n| definition(after, &name[n..]))
        }
        Some((&c, rest)) => name.first() == Some(&c) && definition(rest, &name[1..]),
    }
}

/// A name the pattern produces: each conversion given bytes of `fill` it
/// accepts (or `7`, `a`, `x`), literal bytes as they are; `None` for a
/// pattern with a conversion the matcher does not read.
fn produce(pattern: &[u8], fill: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = pattern;
    let mut fill = fill.iter().copied().cycle().take(4096);
    while let Some((&c, after)) = rest.split_first() {
        if c != b'%' {
            out.push(c);
            rest = after;
            continue;
        }
        let at = after.iter().position(|b| !b"0123456789-+ #.lhzjt".contains(b))?;
        let accept: fn(u8) -> bool = match after[at] {
            b'%' => {
                out.push(b'%');
                rest = &after[at + 1..];
                continue;
            }
            b'd' | b'i' | b'u' => |b| b.is_ascii_digit(),
            b'x' | b'X' => |b| b.is_ascii_hexdigit(),
            b's' => |b| b != b'/',
            _ => return None,
        };
        let mut text: Vec<u8> = fill.by_ref().take(3).filter(|&b| accept(b)).collect();
        if text.is_empty() {
            text.push(if accept(b'7') { b'7' } else { b'a' });
        }
        out.extend(text);
        rest = &after[at + 1..];
    }
    Some(out)
}
