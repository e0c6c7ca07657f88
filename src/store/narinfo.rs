//! `.narinfo` files of a Nix binary cache: parsing, the signed fingerprint,
//! and signature checks against trusted keys.
//!
//! A narinfo is untrusted input: the parser refuses what Nix would refuse
//! (missing fields, a store path outside the store, a hash of the wrong
//! length) and what would let a URL leave the cache (an absolute URL, `..`).
//! The signature is Ed25519 over Nix's fingerprint of the path:
//! `1;<store path>;sha256:<nix32 NAR hash>;<NAR size>;<references, full
//! paths, comma-separated>` (docs/binary-cache.md has the details).

use base64::Engine as _;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};

/// Nix's base-32 alphabet (no e, o, u, t).
const NIX32: &[u8; 32] = b"0123456789abcdfghijklmnpqrsvwxyz";

/// Why a narinfo or a key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NarInfoError {
    /// A line that is not `Key: value`.
    #[error("line {line}: not a \"Key: value\" line")]
    Syntax {
        /// 1-based line number.
        line: usize,
    },
    /// A line holding a control character: a CR of CRLF line ends (Nix
    /// splits on LF only, so its values would end in CR and fail), NUL, tab...
    #[error("line {line}: control character {char:?} (narinfo lines end in LF, with no CR)")]
    Control {
        /// 1-based line number.
        line: usize,
        /// The character.
        char: char,
    },
    /// A field given twice (other than `Sig`).
    #[error("line {line}: {field} given twice")]
    Repeated {
        /// 1-based line number.
        line: usize,
        /// The field.
        field: &'static str,
    },
    /// A field Nix requires is absent.
    #[error("no {0} field")]
    Missing(&'static str),
    /// A field whose value is not valid.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong, with the value quoted.
        reason: String,
    },
    /// A `--trusted-public-key` or `Sig` that is not `name:base64`.
    #[error("{0}")]
    Key(String),
}

/// A SHA-256 hash, as narinfo files and `nix hash` print it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sha256(pub [u8; 32]);

impl Sha256 {
    /// Parses `sha256:<nix32>` (what Nix writes), `sha256:<hex>` or the SRI
    /// form `sha256-<base64>`.
    pub fn parse(text: &str) -> Result<Sha256, String> {
        let bytes = if let Some(rest) = text.strip_prefix("sha256:") {
            match rest.len() {
                52 => nix32_decode(rest, 32),
                64 => hex_decode(rest),
                n => Err(format!("{n} digits after sha256: (52 base-32 or 64 hex)")),
            }
        } else if let Some(rest) = text.strip_prefix("sha256-") {
            base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|e| format!("bad base64: {e}"))
        } else {
            Err("not a sha256 hash (sha256:... or sha256-...)".to_string())
        };
        let bytes = bytes.map_err(|reason| format!("{}: {reason}", quote(text)))?;
        let array: [u8; 32] =
            bytes.try_into().map_err(|_| format!("{}: not 32 bytes", quote(text)))?;
        Ok(Sha256(array))
    }

    /// `sha256:<nix32>`, the form of the fingerprint and of narinfo files.
    pub fn to_nix32(&self) -> String {
        format!("sha256:{}", nix32_encode(&self.0))
    }
}

/// How the NAR a narinfo names is compressed (the `Compression` field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compression {
    /// `none`.
    None,
    /// `xz`.
    Xz,
    /// `zstd`.
    Zstd,
    /// `bzip2` (also Nix's default when the field is absent).
    Bzip2,
    /// Anything else, kept so the error can name it.
    Other(String),
}

impl Compression {
    /// The name the narinfo's `Compression` field gives it.
    pub fn name(&self) -> &str {
        match self {
            Compression::None => "none",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
            Compression::Bzip2 => "bzip2",
            Compression::Other(name) => name,
        }
    }
}

/// The fields of a narinfo that the audit uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NarInfo {
    /// The full store path (`/nix/store/<hash>-<name>`).
    pub store_path: String,
    /// Where the (compressed) NAR is, relative to the cache's root.
    pub url: String,
    /// How the NAR at `url` is compressed.
    pub compression: Compression,
    /// Hash of the uncompressed NAR.
    pub nar_hash: Sha256,
    /// Size of the uncompressed NAR.
    pub nar_size: u64,
    /// Store paths this one refers to, as base names (`<hash>-<name>`), sorted.
    pub references: Vec<String>,
    /// `Sig` lines: `key-name:base64`.
    pub signatures: Vec<String>,
    /// Size of the compressed NAR (`FileSize`), when the cache says.
    pub file_size: Option<u64>,
}

impl NarInfo {
    /// Parses a narinfo whose paths must be in `store_dir` (`/nix/store`).
    pub fn parse(text: &str, store_dir: &str) -> Result<NarInfo, NarInfoError> {
        let mut store_path = None;
        let mut url = None;
        let mut compression = None;
        let mut nar_hash = None;
        let mut nar_size = None;
        let mut references = None;
        let mut signatures = Vec::new();
        let mut file_size = None;
        // Split on LF only, as Nix does: the CR of a CRLF stays in the line.
        for (i, line) in text.split('\n').enumerate() {
            let line_no = i + 1;
            if line.is_empty() {
                continue;
            }
            if let Some(c) = line.chars().find(|c| c.is_control()) {
                return Err(NarInfoError::Control { line: line_no, char: c });
            }
            let (key, value) =
                line.split_once(": ").ok_or(NarInfoError::Syntax { line: line_no })?;
            let slot: (&'static str, &mut Option<String>) = match key {
                "StorePath" => ("StorePath", &mut store_path),
                "URL" => ("URL", &mut url),
                "Compression" => ("Compression", &mut compression),
                "NarHash" => ("NarHash", &mut nar_hash),
                "NarSize" => ("NarSize", &mut nar_size),
                "References" => ("References", &mut references),
                "Sig" => {
                    signatures.push(value.to_string());
                    continue;
                }
                "FileSize" => ("FileSize", &mut file_size),
                // FileHash, Deriver, CA, System...: not needed.
                _ => continue,
            };
            if slot.1.is_some() {
                return Err(NarInfoError::Repeated { line: line_no, field: slot.0 });
            }
            *slot.1 = Some(value.to_string());
        }

        let store_path = store_path.ok_or(NarInfoError::Missing("StorePath"))?;
        let base =
            store_path.strip_prefix(store_dir).and_then(|rest| rest.strip_prefix('/')).ok_or_else(
                || invalid("StorePath", format!("{} is not in {store_dir}", quote(&store_path))),
            )?;
        check_base_name(base).map_err(|r| invalid("StorePath", r))?;

        let url = url.ok_or(NarInfoError::Missing("URL"))?;
        // Nix writes `nar/<hash>.nar[.xz]`. Besides absolute paths, schemes
        // and dot segments, refuse what an HTTP client would reinterpret:
        // `%2e%2e` and `\` are dot segments and `/` to URL parsers, `?` and
        // `#` end the path, whitespace is not allowed.
        if url.is_empty()
            || url.starts_with('/')
            || url.contains("://")
            || url.split('/').any(|c| c == ".." || c == "." || c.is_empty())
            || url.chars().any(|c| matches!(c, '%' | '\\' | '?' | '#') || c.is_whitespace())
        {
            return Err(invalid(
                "URL",
                format!("{} is not a relative path inside the cache", quote(&url)),
            ));
        }

        let compression = match compression.as_deref().unwrap_or("bzip2") {
            "none" => Compression::None,
            "xz" => Compression::Xz,
            "zstd" => Compression::Zstd,
            "bzip2" => Compression::Bzip2,
            other => Compression::Other(other.to_string()),
        };
        let nar_hash = Sha256::parse(&nar_hash.ok_or(NarInfoError::Missing("NarHash"))?)
            .map_err(|r| invalid("NarHash", r))?;
        let nar_size = nar_size.ok_or(NarInfoError::Missing("NarSize"))?;
        let nar_size = nar_size
            .parse::<u64>()
            .map_err(|_| invalid("NarSize", format!("{} is not a size", quote(&nar_size))))?;
        let mut references: Vec<String> =
            references.unwrap_or_default().split_whitespace().map(str::to_string).collect();
        for r in &references {
            check_base_name(r).map_err(|reason| invalid("References", reason))?;
        }
        references.sort();
        references.dedup();
        let file_size = match file_size {
            Some(v) => Some(
                v.parse::<u64>()
                    .map_err(|_| invalid("FileSize", format!("{} is not a size", quote(&v))))?,
            ),
            None => None,
        };
        Ok(NarInfo {
            store_path,
            url,
            compression,
            nar_hash,
            nar_size,
            references,
            signatures,
            file_size,
        })
    }

    /// What Nix signs: see the module documentation.
    pub fn fingerprint(&self, store_dir: &str) -> String {
        let refs: Vec<String> =
            self.references.iter().map(|r| format!("{store_dir}/{r}")).collect();
        format!(
            "1;{};{};{};{}",
            self.store_path,
            self.nar_hash.to_nix32(),
            self.nar_size,
            refs.join(",")
        )
    }

    /// Checks that a signature by one of `keys` covers this narinfo. An
    /// unsigned narinfo, or one signed only by other keys or badly, is
    /// refused with a reason that names the keys involved.
    pub fn verify<'k>(
        &self,
        store_dir: &str,
        keys: &'k [PublicKey],
    ) -> Result<&'k str, NarInfoError> {
        let fingerprint = self.fingerprint(store_dir);
        if self.signatures.is_empty() {
            return Err(NarInfoError::Key("the narinfo is not signed".to_string()));
        }
        let mut seen = Vec::new();
        for sig in &self.signatures {
            // As Nix does: the key name first (no colon, or an empty name:
            // no name), and a signature by a key not trusted is skipped
            // before its payload is looked at, so a junk line cannot sink a
            // good signature. Unlike Nix (which then fails the path), a
            // malformed payload under a trusted name only does not count.
            let name = sig.split_once(':').map_or("", |(name, _)| name);
            let Some(key) = keys.iter().find(|k| !name.is_empty() && k.name == name) else {
                let shown = if name.is_empty() { quote(sig) } else { name.to_string() };
                seen.push(format!("{shown} (not trusted)"));
                continue;
            };
            let bytes = split_key(sig, "Sig").ok().and_then(|(_, b)| <[u8; 64]>::try_from(b).ok());
            let Some(bytes) = bytes else {
                seen.push(format!("{name} (not base64 of 64 bytes)"));
                continue;
            };
            let signature = Signature::from_bytes(&bytes);
            if key.key.verify(fingerprint.as_bytes(), &signature).is_ok() {
                return Ok(&key.name);
            }
            seen.push(format!("{name} (does not match)"));
        }
        Err(NarInfoError::Key(format!("no valid signature by a trusted key: {}", seen.join(", "))))
    }
}

/// A trusted public key, `name:base64` as in `trusted-public-keys`.
#[derive(Debug, Clone)]
pub struct PublicKey {
    /// The key's name (`cache.nixos.org-1`).
    pub name: String,
    key: VerifyingKey,
}

impl PublicKey {
    /// Parses `name:base64(32 bytes)`.
    pub fn parse(text: &str) -> Result<PublicKey, NarInfoError> {
        let (name, bytes) = split_key(text, "public key")?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| NarInfoError::Key(format!("public key {name}: not 32 bytes")))?;
        let key = VerifyingKey::from_bytes(&bytes)
            .map_err(|_| NarInfoError::Key(format!("public key {name}: not an Ed25519 key")))?;
        Ok(PublicKey { name: name.to_string(), key })
    }
}

fn split_key<'t>(text: &'t str, what: &str) -> Result<(&'t str, Vec<u8>), NarInfoError> {
    let (name, data) = text
        .split_once(':')
        .filter(|(name, _)| !name.is_empty())
        .ok_or_else(|| NarInfoError::Key(format!("{what} {} is not name:base64", quote(text))))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|_| NarInfoError::Key(format!("{what} {name}: bad base64")))?;
    Ok((name, bytes))
}

/// Checks `<32 nix32 chars>-<name>` with Nix's rules for names.
pub fn check_base_name(base: &str) -> Result<(), String> {
    let bad = || format!("{} is not a store path name (<hash>-<name>)", quote(base));
    let (hash, name) = base.split_once('-').ok_or_else(bad)?;
    if hash.len() != 32 || !hash.bytes().all(|b| NIX32.contains(&b)) {
        return Err(bad());
    }
    if name.is_empty()
        || name.len() > 211
        || name.starts_with('.')
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-._?=".contains(&b))
    {
        return Err(bad());
    }
    Ok(())
}

/// Nix's base-32 encoding (least significant digit last, its own alphabet).
pub fn nix32_encode(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return String::new();
    }
    let len = (bytes.len() * 8 - 1) / 5 + 1;
    (0..len)
        .rev()
        .map(|n| {
            let (i, j) = (n * 5 / 8, n * 5 % 8);
            let low = u16::from(bytes[i]) >> j;
            let high = bytes.get(i + 1).map_or(0, |&b| u16::from(b) << (8 - j));
            NIX32[usize::from((low | high) & 0x1f)] as char
        })
        .collect()
}

/// Decodes [`nix32_encode`]'s form into `size` bytes.
pub fn nix32_decode(text: &str, size: usize) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; size];
    let len = text.len();
    for (idx, c) in text.bytes().enumerate() {
        let digit = NIX32
            .iter()
            .position(|&d| d == c)
            .ok_or_else(|| format!("{:?} is not a base-32 digit", c as char))?
            as u16;
        let n = len - idx - 1;
        let (i, j) = (n * 5 / 8, n * 5 % 8);
        if i >= size {
            return Err("too many digits".to_string());
        }
        out[i] |= (digit << j) as u8;
        let carry = digit >> (8 - j);
        match out.get_mut(i + 1) {
            Some(b) => *b |= carry as u8,
            None if carry != 0 => return Err("the value does not fit".to_string()),
            None => {}
        }
    }
    Ok(out)
}

fn hex_decode(text: &str) -> Result<Vec<u8>, String> {
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| "bad hex digit".to_string())
        })
        .collect()
}

fn invalid(field: &'static str, reason: String) -> NarInfoError {
    NarInfoError::Invalid { field, reason }
}

fn quote(text: &str) -> String {
    let cut: String = text.chars().take(80).collect();
    format!("{:?}{}", cut, if cut.len() < text.len() { "..." } else { "" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nix32_round_trips_and_refuses_overflow() {
        for bytes in [vec![0u8; 32], (0..32).collect::<Vec<u8>>(), vec![0xff; 32], vec![0xab; 20]] {
            let text = nix32_encode(&bytes);
            assert_eq!(text.len(), (bytes.len() * 8 - 1) / 5 + 1);
            assert_eq!(nix32_decode(&text, bytes.len()).unwrap(), bytes);
        }
        // 52 digits hold 260 bits: a first digit above 1 does not fit 256.
        let mut text = nix32_encode(&[0xff; 32]);
        assert!(text.starts_with('1'));
        text.replace_range(0..1, "2");
        assert!(nix32_decode(&text, 32).is_err());
        assert!(nix32_decode("e", 32).is_err());
    }

    const STORE: &str = "/nix/store";
    const PATH: &str = "/nix/store/0aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-hello-2.12";

    fn info(extra: &str) -> String {
        format!(
            "StorePath: {PATH}\nURL: nar/x.nar.xz\nCompression: xz\nNarHash: sha256:{}\nNarSize: 120\nReferences: 1bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-glibc-2.40 0aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-hello-2.12\n{extra}",
            "1".repeat(52)
        )
    }

    #[test]
    fn fingerprint_has_full_sorted_references() {
        let i = NarInfo::parse(&info(""), STORE).unwrap();
        assert_eq!(
            i.fingerprint(STORE),
            format!(
                "1;{PATH};sha256:{};120;/nix/store/0aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-hello-2.12,/nix/store/1bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-glibc-2.40",
                "1".repeat(52)
            )
        );
        assert_eq!(i.compression, Compression::Xz);
    }

    #[test]
    fn hostile_fields_are_refused_by_name() {
        let cases = [
            (info("").replace("URL: nar/x.nar.xz", "URL: ../../etc/passwd"), "URL"),
            (info("").replace("URL: nar/x.nar.xz", "URL: /etc/passwd"), "URL"),
            (info("").replace("URL: nar/x.nar.xz", "URL: http://evil/x"), "URL"),
            (info("").replace(PATH, "/tmp/0aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-x"), "StorePath"),
            (info("").replace("-hello-2.12\nURL", "-../x\nURL"), "StorePath"),
            (info("").replace("NarSize: 120", "NarSize: -1"), "NarSize"),
            (info("").replace(&"1".repeat(52), "e"), "NarHash"),
        ];
        for (text, field) in cases {
            match NarInfo::parse(&text, STORE) {
                Err(NarInfoError::Invalid { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{field}: {other:?}"),
            }
        }
        assert_eq!(
            NarInfo::parse(&info("NarSize: 3\n"), STORE),
            Err(NarInfoError::Repeated { line: 7, field: "NarSize" })
        );
        assert_eq!(
            NarInfo::parse("StorePath: x\nnonsense\n", STORE),
            Err(NarInfoError::Syntax { line: 2 })
        );
        assert_eq!(
            NarInfo::parse(&info("").replace("NarSize: 120\n", ""), STORE),
            Err(NarInfoError::Missing("NarSize"))
        );
    }

    #[test]
    fn signatures_are_checked() {
        use ed25519_dalek::{Signer, SigningKey};
        let secret = SigningKey::from_bytes(&[7u8; 32]);
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let key = PublicKey::parse(&format!("test-1:{}", b64(secret.verifying_key().as_bytes())))
            .unwrap();
        let unsigned = NarInfo::parse(&info(""), STORE).unwrap();
        let sig = secret.sign(unsigned.fingerprint(STORE).as_bytes());
        let signed =
            NarInfo::parse(&info(&format!("Sig: test-1:{}\n", b64(&sig.to_bytes()))), STORE)
                .unwrap();
        assert_eq!(signed.verify(STORE, std::slice::from_ref(&key)).unwrap(), "test-1");
        assert!(unsigned.verify(STORE, std::slice::from_ref(&key)).is_err());
        let mut tampered = signed.clone();
        tampered.nar_size += 1;
        let err = tampered.verify(STORE, std::slice::from_ref(&key)).unwrap_err();
        assert!(err.to_string().contains("test-1 (does not match)"), "{err}");
        let other =
            NarInfo::parse(&info(&format!("Sig: other-1:{}\n", b64(&sig.to_bytes()))), STORE)
                .unwrap();
        let err = other.verify(STORE, &[key]).unwrap_err();
        assert!(err.to_string().contains("other-1 (not trusted)"), "{err}");
    }

    fn field_error(text: &str) -> (&'static str, String) {
        match NarInfo::parse(text, STORE) {
            Err(NarInfoError::Invalid { field, reason }) => (field, reason),
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn every_required_field_missing_or_repeated_is_named() {
        let good = info("");
        for field in ["StorePath", "URL", "NarHash", "NarSize"] {
            let text: String = good
                .lines()
                .filter(|l| !l.starts_with(&format!("{field}: ")))
                .map(|l| l.to_owned() + "\n")
                .collect();
            assert_eq!(NarInfo::parse(&text, STORE), Err(NarInfoError::Missing(field)));
        }
        for (line, field) in ["StorePath", "URL", "Compression", "NarHash", "NarSize", "References"]
            .iter()
            .enumerate()
        {
            let repeated = good.lines().nth(line).unwrap();
            let text = format!("{good}{repeated}\n");
            assert_eq!(
                NarInfo::parse(&text, STORE),
                Err(NarInfoError::Repeated { line: 7, field })
            );
            assert_eq!(
                NarInfo::parse(&text, STORE).unwrap_err().to_string(),
                format!("line 7: {field} given twice")
            );
        }
        // Several Sig lines are allowed (one per key), empty lines skipped.
        let text = info("Sig: a:AAAA\nSig: b:AAAA\n\n");
        assert_eq!(NarInfo::parse(&text, STORE).unwrap().signatures.len(), 2);
        // A line without ": " (Nix's separator) is a syntax error.
        assert_eq!(
            NarInfo::parse(&info("NarSize:120\n"), STORE),
            Err(NarInfoError::Syntax { line: 7 })
        );
        assert_eq!(NarInfo::parse("", STORE), Err(NarInfoError::Missing("StorePath")));
    }

    #[test]
    fn bad_hashes_and_sizes_are_refused_by_field() {
        let hash = format!("sha256:{}", "1".repeat(52));
        for bad in [
            "sha256:".to_string(),
            format!("sha256:{}", "1".repeat(51)),
            format!("sha256:{}", "1".repeat(53)),
            format!("sha256:{}e", "1".repeat(51)),
            format!("sha256:z{}", "1".repeat(51)),
            format!("sha256:{}", "g".repeat(64)),
            format!("sha256:{}é", "0".repeat(62)),
            "sha256-AAAA".to_string(),
            "sha256-!!!!".to_string(),
            format!("sha512:{}", "1".repeat(52)),
            format!("md5:{}", "1".repeat(26)),
            "1".repeat(52),
        ] {
            let (field, reason) = field_error(&info("").replace(&hash, &bad));
            assert_eq!(field, "NarHash", "{bad}: {reason}");
        }
        for bad in ["", "-1", "+-1", "1e3", "0x10", " 5", "18446744073709551616", "١٢"] {
            let (field, reason) =
                field_error(&info("").replace("NarSize: 120", &format!("NarSize: {bad}")));
            assert_eq!(field, "NarSize", "{bad}");
            assert!(reason.contains("is not a size"), "{reason}");
        }
        let max = info("").replace("NarSize: 120", &format!("NarSize: {}", u64::MAX));
        assert_eq!(NarInfo::parse(&max, STORE).unwrap().nar_size, u64::MAX);
    }

    #[test]
    fn urls_that_leave_the_cache_are_refused() {
        for bad in [
            "/etc/passwd",
            "../x",
            "nar/../../x",
            "nar/./x",
            "nar//x",
            "",
            "nar/",
            "http://evil/x",
            "file:///etc/passwd",
            "nar/%2e%2e/%2e%2e/x",
            "nar\\..\\..\\x",
            "nar/x?y=1",
            "nar/x#frag",
            "nar/a b",
        ] {
            let (field, reason) =
                field_error(&info("").replace("URL: nar/x.nar.xz", &format!("URL: {bad}")));
            assert_eq!(field, "URL", "{bad}");
            assert!(reason.contains("not a relative path inside the cache"), "{reason}");
        }
    }

    #[test]
    fn control_characters_and_crlf_are_refused_with_their_line() {
        let crlf = info("").replace('\n', "\r\n");
        assert_eq!(
            NarInfo::parse(&crlf, STORE),
            Err(NarInfoError::Control { line: 1, char: '\r' })
        );
        assert!(NarInfo::parse(&crlf, STORE)
            .unwrap_err()
            .to_string()
            .contains("line 1: control character '\\r'"));
        let nul = info("").replace("NarSize: 120", "NarSize: 12\x000");
        assert_eq!(NarInfo::parse(&nul, STORE), Err(NarInfoError::Control { line: 5, char: '\0' }));
        let tab = info("Deriver:\tx\n");
        assert_eq!(NarInfo::parse(&tab, STORE), Err(NarInfoError::Control { line: 7, char: '\t' }));
    }

    #[test]
    fn a_huge_reference_list_is_read_and_a_bad_member_named() {
        // 20,000 references (what fits in the 1 MiB the cache client reads):
        // parsed, sorted and deduplicated in linear-ish time.
        let refs: Vec<String> = (0..20_000u32)
            .map(|i| {
                let mut hash = nix32_encode(&i.to_le_bytes()).into_bytes();
                hash.resize(32, b'0');
                format!("{}-r{i}", String::from_utf8(hash).unwrap())
            })
            .collect();
        let line = format!("References: {}", refs.join(" "));
        assert!(line.len() < 1 << 20);
        let text = info("")
            .lines()
            .filter(|l| !l.starts_with("References"))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
            + &line
            + "\n";
        let parsed = NarInfo::parse(&text, STORE).unwrap();
        assert_eq!(parsed.references.len(), 20_000);
        assert!(parsed.fingerprint(STORE).len() > 20_000 * 40);
        let (field, reason) = field_error(&text.replace("-r19999", "-../r"));
        assert_eq!(field, "References");
        assert!(reason.contains("-../r"), "{reason}");
    }
}
