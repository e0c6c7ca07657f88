//! Comparing our listing with cuobjdump's: stdout, stderr (after the program
//! name) and exit status, with a line diff for failure messages.

use std::process::Output;

/// A line diff of two outputs, for failure messages.
pub fn line_diff(expected: &[u8], got: &[u8]) -> String {
    let e = String::from_utf8_lossy(expected);
    let g = String::from_utf8_lossy(got);
    let el: Vec<&str> = e.lines().collect();
    let gl: Vec<&str> = g.lines().collect();
    let mut out = String::new();
    for i in 0..el.len().max(gl.len()) {
        match (el.get(i), gl.get(i)) {
            (Some(a), Some(b)) if a == b => out.push_str(&format!("   {a}\n")),
            (a, b) => {
                if let Some(a) = a {
                    out.push_str(&format!(" - {a}\n"));
                }
                if let Some(b) = b {
                    out.push_str(&format!(" + {b}\n"));
                }
            }
        }
    }
    if expected.ends_with(b"\n") != got.ends_with(b"\n") {
        out.push_str(" (final newline differs)\n");
    }
    out
}

/// Compares a cuobjdump run with a cuda-elf-inspect run; `None` when they
/// agree (stdout, stderr after the program name, status).
pub fn compare(label: &str, expected: &Output, got: &Output) -> Option<String> {
    let got_err = rename_prog(&got.stderr);
    let mut msg = String::new();
    if expected.stdout != got.stdout {
        msg.push_str(&format!(
            "stdout differs (- cuobjdump, + ours):\n{}",
            line_diff(&expected.stdout, &got.stdout)
        ));
    }
    if expected.stderr != got_err {
        msg.push_str(&format!("stderr differs:\n{}", line_diff(&expected.stderr, &got_err)));
    }
    if expected.status.code() != got.status.code() {
        msg.push_str(&format!(
            "status differs: cuobjdump {:?}, ours {:?}\n",
            expected.status.code(),
            got.status.code()
        ));
    }
    (!msg.is_empty()).then(|| format!("== {label}\n{msg}"))
}

/// Our stderr with `cuda-elf-inspect ` at line starts read as `cuobjdump `.
pub fn rename_prog(stderr: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .map(|l| match l.strip_prefix("cuda-elf-inspect ") {
            Some(rest) => format!("cuobjdump {rest}\n"),
            None => format!("{l}\n"),
        })
        .collect::<String>()
        .into_bytes()
}
