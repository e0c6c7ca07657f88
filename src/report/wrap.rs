//! Lines people can read: a text line longer than [`WIDTH`] characters is
//! broken at spaces (or, inside a long search list, after a `:`), each
//! continuation indented four spaces past the line's own indent. Real
//! reports had lines of 440 to 3052 characters (a search list of 180
//! characters repeated on every finding, a fix naming a dozen paths).

use std::io::{self, Write};

/// The longest line written, in characters, indent included (a word longer
/// than that, a path of 200 characters, is cut inside it).
pub const WIDTH: usize = 200;

/// `line` as lines of at most [`WIDTH`] characters.
pub fn wrap(line: &str) -> Vec<String> {
    wrap_to(line, WIDTH)
}

/// `line` as lines of at most `width` characters (a build log line's
/// `LEVEL: caller: ` prefix takes its share of [`WIDTH`]). A width too
/// small for the line's own indent and a word is taken as 40.
pub fn wrap_to(line: &str, width: usize) -> Vec<String> {
    let width = width.max(40);
    if line.chars().count() <= width {
        return vec![line.to_string()];
    }
    let indent: String = line.chars().take_while(|c| *c == ' ').collect();
    let cont = format!("{indent}    ");
    let mut out = Vec::new();
    let mut rest: &str = line;
    let mut prefix = String::new();
    loop {
        // An indent as wide as the line: at least some room per piece.
        let room = width.saturating_sub(prefix.chars().count()).max(20);
        if rest.chars().count() <= room {
            out.push(format!("{prefix}{rest}"));
            break;
        }
        // Byte index just past `room` characters.
        let limit = rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i);
        let head = &rest[..limit];
        let cut = match head.rfind(' ').filter(|&i| i > 0) {
            Some(i) => (i, i + 1),
            None => match head.rfind(':').filter(|&i| i > 0) {
                Some(i) => (i + 1, i + 1),
                None => (limit, limit),
            },
        };
        out.push(format!("{prefix}{}", rest[..cut.0].trim_end()));
        rest = rest[cut.1..].trim_start();
        prefix.clone_from(&cont);
        if rest.is_empty() {
            break;
        }
    }
    out
}

/// Writes `line` wrapped ([`wrap`]), each piece ended by a newline: every
/// text line the audit, `--summary` and `--explain` print goes through here.
pub fn put(out: &mut dyn Write, line: &str) -> io::Result<()> {
    for l in wrap(line) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_break_at_spaces_and_colons() {
        assert_eq!(wrap("  short"), ["  short"]);
        let words = format!("  {}", "word ".repeat(100));
        let lines = wrap(words.trim_end());
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH), "{lines:?}");
        assert!(lines[1].starts_with("      word"));
        let dirs = format!("    {}", vec!["/nix/store/abcdef/lib"; 30].join(":"));
        let lines = wrap(&dirs);
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH), "{lines:?}");
        assert_eq!(lines.concat().replace(' ', ""), dirs.replace(' ', ""));
        let blob = "x".repeat(500);
        assert!(wrap(&blob).iter().all(|l| l.chars().count() <= WIDTH));
        assert_eq!(
            wrap(&format!("é{}", "é ".repeat(200))).concat().chars().filter(|c| *c == 'é').count(),
            201
        );
    }
}
