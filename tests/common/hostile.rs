//! File names no tool may be confused by (tests/hostile_names.rs,
//! tests/html_report.rs): bytes that are not UTF-8, newlines, terminal
//! escapes, option-like names, a path near `PATH_MAX`, and names that are
//! JSON, SARIF, workflow-command or markup syntax themselves.

/// The hostile names, as raw bytes (one path component each, except the
/// long one, which is nested folders making a 4,000-byte relative path).
pub fn names() -> Vec<Vec<u8>> {
    let mut long = Vec::new();
    while long.len() < 3_700 {
        long.extend_from_slice(&[b'd'; 240]);
        long.push(b'/');
    }
    long.extend_from_slice(&vec![b'f'; 4_000 - long.len()]);
    vec![
        b"not-utf8-\xff\xfe\xc0.so".to_vec(),
        b"new\nline\r.so".to_vec(),
        b"esc-\x1b[31mred\x1b[0m-\x07bell\x08.so".to_vec(),
        b"-rf".to_vec(),
        b"--format=json".to_vec(),
        long,
        br#"{"findings":[],"a":"b\"}".so"#.to_vec(),
        br#"","uri":"file:passwd#x","level":"none"#.to_vec(),
        b"::error file=x,title=y::z%0A,%25.so".to_vec(),
        b"50% a:b,c #frag ?q=1 \\ .so".to_vec(),
        b"<script>alert(1)<\\script><b>bold.so".to_vec(),
        br#""><img src=x onerror=alert(1)><td class='sass'>S.so"#.to_vec(),
        b"&lt;i&gt; &amp; <!-- ]]> .so".to_vec(),
    ]
}
