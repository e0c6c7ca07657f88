//! What every tool's output is made of, below every module that decides
//! anything: the exit status, the report formats, how names are made safe
//! to show, and the JSON envelope of the binaries' documents.
//!
//! It sits at the bottom of the layering (it imports nothing of ours) so
//! that the library's reports, the cuobjdump listing and the three front
//! ends all speak of statuses and formats in one vocabulary.

use std::process::ExitCode;

use serde::ser::SerializeMap;
use serde::Serialize;

/// How a tool ends. One rule across the tools: 0 all good, 1 the input has
/// a problem the tool exists to find (a broken link, an ELF that needs
/// patching under `--check`, an error finding), 2 the tool itself failed
/// (bad arguments, unreadable build environment, a file it could not read).
/// The cuobjdump listing is the exception: it keeps cuobjdump's own statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: the input is fine.
    Ok,
    /// 1: the input has problems (findings).
    Findings,
    /// 2: the tool failed.
    Failure,
    /// `--list-elf` / `--list-ptx`: what cuobjdump would have exited with.
    Cuobjdump(Cuobjdump),
}

impl ExitStatus {
    /// The one rule: a failure outweighs findings, findings outweigh nothing.
    pub fn of(failed: bool, findings: bool) -> ExitStatus {
        if failed {
            ExitStatus::Failure
        } else if findings {
            ExitStatus::Findings
        } else {
            ExitStatus::Ok
        }
    }

    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Ok => 0,
            ExitStatus::Findings => 1,
            ExitStatus::Failure => 2,
            ExitStatus::Cuobjdump(c) => c.code(),
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        ExitCode::from(status.code())
    }
}

/// Documents that carry the status (`"status": 1`) carry its number.
impl Serialize for ExitStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(self.code())
    }
}

/// cuobjdump's exit statuses for a listing, ordered so that the worst of
/// several files is their maximum (a failure beats "no device code").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cuobjdump {
    /// 0: listed (possibly nothing of the kind asked for).
    Listed,
    /// 255: the file holds no device code.
    NoDeviceCode,
    /// 1: the file could not be opened or its fatbin header is invalid.
    Failed,
}

impl Cuobjdump {
    /// The number cuobjdump exits with.
    pub fn code(self) -> u8 {
        match self {
            Cuobjdump::Listed => 0,
            Cuobjdump::Failed => 1,
            Cuobjdump::NoDeviceCode => 255,
        }
    }
}

/// Report formats on stdout. Each binary accepts its own subset (the hooks
/// text and json, the audit all four), with its own words for each in
/// `--help`; the front ends in `cli/` say which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// For people (and setup.sh-style log lines inside a build).
    Text,
    /// One JSON document (schemas in docs/).
    Json,
    /// SARIF 2.1.0, for code-scanning services.
    Sarif,
    /// GitHub Actions workflow commands (annotations).
    Github,
    /// One self-contained HTML page (the audit's coverage matrix).
    Html,
    /// Hydra's `nix-support/hydra-metrics` lines (`NAME VALUE [UNIT]`).
    HydraMetrics,
}

impl Format {
    /// Every format, in `--help` order.
    pub const ALL: [Format; 6] = [
        Format::Text,
        Format::Json,
        Format::Sarif,
        Format::Github,
        Format::Html,
        Format::HydraMetrics,
    ];

    /// The name as `--format` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Sarif => "sarif",
            Format::Github => "github",
            Format::Html => "html",
            Format::HydraMetrics => "hydra-metrics",
        }
    }

    /// The format `--format NAME` names.
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// What to do with a control character in a name shown to people (a file
/// name can hold a newline or a terminal escape sequence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controls {
    /// Replace it with U+FFFD: the audit's one-line formats (text report,
    /// stderr notices), where the line must stay one line and readable.
    Replace,
    /// Show it escaped (`\n`, `\u{1b}`): `--summary`, whose reader may want
    /// to know exactly which byte the name holds.
    Escape,
}

/// `text` fit for a terminal or a one-line format: control characters
/// replaced or escaped as `controls` says, everything else kept.
pub fn sanitize(text: &str, controls: Controls) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match (c.is_control(), controls) {
            (false, _) => out.push(c),
            (true, Controls::Replace) => out.push(char::REPLACEMENT_CHARACTER),
            (true, Controls::Escape) => out.extend(c.escape_default()),
        }
    }
    out
}

/// `bytes` fit for a terminal or a log line, as [`sanitize`] makes text,
/// for messages built from raw path bytes (the setup.sh log): the UTF-8 in
/// them sanitised, other bytes kept as they are (a log line names exactly
/// the file on disk), except a lone byte 0x80..=0x9f, which a terminal not
/// in UTF-8 mode takes as a C1 control (0x9b is CSI): escaped `\x9b` or
/// replaced.
pub fn sanitize_bytes(bytes: &[u8], controls: Controls) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        if valid.chars().any(char::is_control) {
            out.extend_from_slice(sanitize(valid, controls).as_bytes());
        } else {
            out.extend_from_slice(valid.as_bytes());
        }
        for &b in chunk.invalid() {
            match (b, controls) {
                (0x80..=0x9f, Controls::Escape) => {
                    out.extend_from_slice(format!("\\x{b:02x}").as_bytes())
                }
                (0x80..=0x9f, Controls::Replace) => {
                    out.extend_from_slice(char::REPLACEMENT_CHARACTER.to_string().as_bytes())
                }
                _ => out.push(b),
            }
        }
    }
    out
}

/// The JSON document a binary prints on stdout: its body under one key,
/// with a schema version where the document has one (`--summary`), and the
/// refused arguments and the exit status where the tool takes paths by hand
/// (the hooks). Keys come out in that order: version, body, argument errors,
/// status.
#[derive(Debug)]
pub struct Envelope<'a, T: Serialize> {
    /// The schema version (`--summary`'s is 1), if the document has one.
    pub version: Option<u32>,
    /// The key the body goes under (`files`, `report`, `outputs`).
    pub key: &'static str,
    /// The report.
    pub body: &'a T,
    /// The hooks: paths given by hand that were refused, and the status.
    pub outcome: Option<(&'a [String], ExitStatus)>,
}

impl<'a, T: Serialize> Envelope<'a, T> {
    /// A versioned document: `{"version": N, key: body}`.
    pub fn versioned(version: u32, key: &'static str, body: &'a T) -> Self {
        Envelope { version: Some(version), key, body, outcome: None }
    }

    /// A hook's document: `{key: body, "argument_errors": [...], "status": N}`.
    pub fn with_status(
        key: &'static str,
        body: &'a T,
        argument_errors: &'a [String],
        status: ExitStatus,
    ) -> Self {
        Envelope { version: None, key, body, outcome: Some((argument_errors, status)) }
    }
}

impl<T: Serialize> Serialize for Envelope<'_, T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if let Some(v) = self.version {
            map.serialize_entry("version", &v)?;
        }
        map.serialize_entry(self.key, self.body)?;
        if let Some((errors, status)) = &self.outcome {
            map.serialize_entry("argument_errors", errors)?;
            map.serialize_entry("status", status)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_one_rule() {
        assert_eq!(ExitStatus::of(true, true).code(), 2);
        assert_eq!(ExitStatus::of(false, true).code(), 1);
        assert_eq!(ExitStatus::of(false, false).code(), 0);
        let worst = [Cuobjdump::Listed, Cuobjdump::NoDeviceCode, Cuobjdump::Listed];
        assert_eq!(worst.into_iter().max(), Some(Cuobjdump::NoDeviceCode));
        assert_eq!(Cuobjdump::Failed.max(Cuobjdump::NoDeviceCode).code(), 1);
        assert_eq!(ExitStatus::Cuobjdump(Cuobjdump::NoDeviceCode).code(), 255);
    }

    #[test]
    fn formats_are_named_as_the_flag_takes_them() {
        for f in Format::ALL {
            assert_eq!(Format::from_name(f.name()), Some(f));
        }
        assert_eq!(Format::from_name("yaml"), None);
    }

    #[test]
    fn control_characters_are_replaced_or_escaped() {
        let name = "lib\nx\u{1b}[31m.so";
        assert_eq!(sanitize(name, Controls::Replace), "lib\u{fffd}x\u{fffd}[31m.so");
        assert_eq!(sanitize(name, Controls::Escape), "lib\\nx\\u{1b}[31m.so");
        assert_eq!(sanitize("plain/é.so", Controls::Escape), "plain/é.so");
    }

    #[test]
    fn bytes_keep_what_is_not_utf8_and_lose_their_controls() {
        let name = b"lib\nx\x1b]2;t\x07\xff\xc2\x9b\x9b.so";
        assert_eq!(
            sanitize_bytes(name, Controls::Escape),
            b"lib\\nx\\u{1b}]2;t\\u{7}\xff\\u{9b}\\x9b.so"
        );
        let mut replaced = "lib\u{fffd}x\u{fffd}]2;t\u{fffd}".as_bytes().to_vec();
        replaced.push(0xff);
        replaced.extend_from_slice("\u{fffd}\u{fffd}.so".as_bytes());
        assert_eq!(sanitize_bytes(name, Controls::Replace), replaced);
        assert_eq!(sanitize_bytes(b"/a/\xff\xfe b.so", Controls::Escape), b"/a/\xff\xfe b.so");
    }

    #[test]
    fn envelopes_keep_their_key_order() {
        let body = vec![1, 2];
        let v = serde_json::to_string(&Envelope::versioned(1, "files", &body)).unwrap();
        assert_eq!(v, r#"{"version":1,"files":[1,2]}"#);
        let errors = ["x: no such file".to_string()];
        let h = Envelope::with_status("outputs", &body, &errors, ExitStatus::Failure);
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"{"outputs":[1,2],"argument_errors":["x: no such file"],"status":2}"#
        );
    }
}
