//! `--format html`: one self-contained page (no network: inline style, one
//! small inline script, and a Content-Security-Policy that forbids loading
//! anything else). It holds the coverage matrix ([`super::matrix`], files
//! grouped by store path, a letter and a colour per cell, a legend), the
//! findings grouped by check with the check table's why and fix once,
//! filters by severity and check (the script; without it the page shows
//! everything), the failures, and the arguments and version that made it.
//!
//! Every string from the input (file names, messages) goes through
//! [`sanitize`] (control characters replaced) and [`escape`] (markup
//! characters as entities), in text and in attributes alike: a file named
//! `<script>` shows as that text. Written straight to the writer, so 10,000
//! files stay a few megabytes and one pass.

use std::io::{self, Write};

use base64::Engine;
use sha2::{Digest, Sha256};

use super::matrix::{self, Cell, Entry, Matrix};
use super::{Report, TOOL};
use crate::audit::finding::{CheckId, Finding, Severity};
use crate::audit::FileFacts;
use crate::output::{sanitize, Controls};

/// `text` safe in HTML text and in a quoted attribute: control characters
/// replaced (a name may hold any byte but `/` and NUL), `& < > " '` as
/// entities.
pub fn escape(text: &str) -> String {
    let clean = sanitize(text, Controls::Replace);
    let mut out = String::with_capacity(clean.len() + 8);
    for c in clean.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#111}\
code,.file,.group th{font-family:ui-monospace,monospace;font-size:13px}\
table{border-collapse:collapse}th,td{padding:1px 6px;text-align:left}\
table.matrix thead th{background:#fff;border-bottom:2px solid #444}\
table.matrix td{text-align:center;font-weight:bold;border:1px solid #fff;min-width:2.2em}\
tr.group th{background:#eee;padding-top:6px;border-top:1px solid #999}\
.file{font-weight:normal;padding-left:1.5em}.req{text-decoration:underline}\
.sass{background:#b9e4bb}.ptx{background:#ffe9a6}.ptx-driver-fails{background:#ffb38a}\
.link-stubs{background:#d9c6ec}.not-read{background:#d5d5d5}.nothing{background:#f4a6a6}\
.legend{margin-bottom:1em}.legend td:first-child{text-align:center;font-weight:bold;width:2em}\
section.check{border-left:4px solid #999;padding-left:1em;margin:1em 0}\
section.check.error{border-color:#c62828}section.check.warning{border-color:#ef6c00}\
.sev{font-weight:bold;text-transform:uppercase;font-size:12px}\
table.findings td{border-bottom:1px solid #ddd;vertical-align:top}#filters{margin:1em 0}\
table.matrix{table-layout:fixed}col.f{width:24em}table.matrix th{overflow-wrap:anywhere}\
table.matrix.head{position:sticky;top:0;z-index:1}section.group,section.check{content-visibility:auto;contain-intrinsic-size:auto 20em}\
.hide-error tr.error,.hide-warning tr.warning,.hide-info tr.info{display:none}";

/// Shows the filters and applies them: severities (checkboxes) and one
/// check (a list), as classes and an attribute on the findings list that
/// the style rules act on; nothing is removed.
const SCRIPT: &str = "(function(){var f=document.getElementById('filters'),l=document.getElementById('findings-list');\
if(!f||!l)return;f.hidden=false;f.addEventListener('change',function(){\
f.querySelectorAll('input[name=sev]').forEach(function(i){l.classList.toggle('hide-'+i.value,!i.checked);});\
var c=f.querySelector('select').value;if(c)l.dataset.only=c;else delete l.dataset.only;});})();";

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

/// Writes the page. `args` is the command line that made the report.
pub fn write(out: &mut dyn Write, report: &Report<FileFacts>, args: &[String]) -> io::Result<()> {
    let mut out = io::BufWriter::with_capacity(1 << 16, out);
    head(&mut out, report, args)?;
    let m = matrix::build(&report.files);
    legend(&mut out)?;
    matrix_table(&mut out, &m)?;
    findings(&mut out, &report.findings)?;
    failures(&mut out, report)?;
    writeln!(out, "<script>{SCRIPT}</script>\n</body>\n</html>")?;
    out.flush()
}

/// The command line shown: arguments with blanks or quotes in single quotes.
fn command_line(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty() && a.bytes().all(|b| b.is_ascii_graphic() && !b"'\"\\$`".contains(&b))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn head(out: &mut dyn Write, report: &Report<FileFacts>, args: &[String]) -> io::Result<()> {
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT));
    let s = &report.summary;
    writeln!(out, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">")?;
    // Nothing may be fetched: no source but the inline style and this
    // one script (by its hash).
    writeln!(
        out,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{hash}'; img-src 'none'; form-action 'none'; base-uri 'none'\">"
    )?;
    writeln!(out, "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">")?;
    writeln!(out, "<title>{TOOL} report</title>\n<style>{STYLE}</style>\n</head>\n<body>")?;
    writeln!(out, "<h1>{TOOL} report</h1>")?;
    writeln!(
        out,
        "<p id=\"made-by\">Made by {TOOL} {}</p>\n<details><summary>Command line ({})</summary><code id=\"command\">{}</code></details>",
        env!("CARGO_PKG_VERSION"),
        super::count(args.len().saturating_sub(1), "argument", "arguments"),
        escape(&command_line(args))
    )?;
    writeln!(
        out,
        "<p id=\"summary\">{}: {}, {}, {}; {}{}</p>",
        super::count(s.files, "file", "files"),
        super::count(s.errors, "error", "errors"),
        super::count(s.warnings, "warning", "warnings"),
        super::count(s.infos, "info", "infos"),
        super::count(s.failures, "file not examined", "files not examined"),
        if s.baselined > 0 { format!("; {} baselined", s.baselined) } else { String::new() }
    )
}

fn legend(out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "<h2 id=\"coverage\">Coverage</h2>")?;
    writeln!(out, "<table class=\"legend\"><caption>Legend</caption><tbody>")?;
    for c in Cell::ALL {
        writeln!(
            out,
            "<tr><td class=\"{}\">{}</td><td>{}</td></tr>",
            c.class(),
            c.letter(),
            escape(c.meaning())
        )?;
    }
    writeln!(
        out,
        "<tr><td class=\"req\">9.0*</td><td>a requested capability (the others are present in some file)</td></tr>\n</tbody></table>"
    )
}

fn cell_title(column: &str, e: &Entry) -> String {
    let what = match e.cell {
        Cell::Sass => "SASS",
        Cell::Ptx | Cell::PtxDriverFails => "PTX, JIT",
        Cell::LinkStubs => "link stubs only",
        Cell::NotRead => "device code not read",
        Cell::Nothing => "nothing runs",
    };
    let mut t = format!("{column}: {what}");
    if let Some(code) = &e.code {
        t.push(' ');
        t.push_str(code);
    }
    if let Some(d) = &e.driver {
        t.push_str("; ");
        t.push_str(d);
    }
    t
}

/// The matrix: one sticky header table, then one table per group, all of
/// one fixed layout (so columns line up without measuring every cell), each
/// group in a section the browser may skip rendering while off screen.
fn matrix_table(out: &mut dyn Write, m: &Matrix<'_>) -> io::Result<()> {
    if m.groups.is_empty() {
        writeln!(out, "<p>No file has device code.</p>")?;
    } else {
        // A section skipped off screen clips to its box: as wide as its table.
        let width = 24.0 + 3.5 * m.columns.len() as f64;
        writeln!(out, "<style>table.matrix,section.group{{width:{width}em}}</style>")?;
        let cols =
            format!("<colgroup><col class=\"f\"><col span=\"{}\"></colgroup>", m.columns.len());
        write!(
            out,
            "<div id=\"matrix\"><table class=\"matrix head\">{cols}<thead><tr><th>file</th>"
        )?;
        for c in &m.columns {
            let (class, mark) = if c.requested { (" class=\"req\"", "*") } else { ("", "") };
            write!(out, "<th data-cap=\"{0}\"{class}>{0}{mark}</th>", escape(&c.name))?;
        }
        writeln!(out, "</tr></thead></table>")?;
        for g in &m.groups {
            group_table(out, m, g, &cols)?;
        }
        writeln!(out, "</div>")?;
    }
    if m.without_device_code > 0 {
        writeln!(
            out,
            "<p>{} without device code (not in the matrix).</p>",
            super::count(m.without_device_code, "file", "files")
        )?;
    }
    Ok(())
}

fn group_table(
    out: &mut dyn Write,
    m: &Matrix<'_>,
    g: &matrix::Group<'_>,
    cols: &str,
) -> io::Result<()> {
    let name = escape(&g.name);
    let width = m.columns.len() + 1;
    writeln!(
        out,
        "<section class=\"group\"><table class=\"matrix\">{cols}<tbody><tr class=\"group\"><th colspan=\"{width}\" scope=\"rowgroup\">{name}</th></tr>"
    )?;
    for row in &g.rows {
        let path = row.file.path.to_string_lossy();
        let shown = path.strip_prefix(g.name.as_str()).unwrap_or(&path);
        let shown = shown.strip_prefix('/').unwrap_or(shown);
        write!(
            out,
            "<tr data-path=\"{}\"><th scope=\"row\" class=\"file\">{}</th>",
            escape(&path),
            escape(if shown.is_empty() { &path } else { shown })
        )?;
        for (c, e) in m.columns.iter().zip(&row.cells) {
            write!(
                out,
                "<td class=\"{}\" title=\"{}\">{}</td>",
                e.cell.class(),
                escape(&cell_title(&c.name, e)),
                e.cell.letter()
            )?;
        }
        writeln!(out, "</tr>")?;
    }
    writeln!(out, "</tbody></table></section>")
}

/// The findings, per check: a row per file and severity, its messages one
/// per line. The filters set classes on the list; style rules (one per
/// check) hide what is filtered out, so filtering costs no walk over rows.
fn findings(out: &mut dyn Write, findings: &[Finding]) -> io::Result<()> {
    writeln!(out, "<h2 id=\"findings\">Findings</h2>")?;
    if findings.is_empty() {
        return writeln!(out, "<p>No findings.</p>");
    }
    let mut checks: Vec<CheckId> = findings.iter().map(|f| f.check).collect();
    checks.sort_unstable_by_key(|c| (std::cmp::Reverse(c.severity()), c.id()));
    checks.dedup();
    write!(out, "<style>")?;
    for c in &checks {
        write!(out, "#findings-list[data-only]:not([data-only=\"{0}\"]) section[data-check=\"{0}\"]{{display:none}}", c.id())?;
    }
    writeln!(out, "</style>")?;
    // The filters, hidden until the script shows them: without script
    // everything is shown and nothing pretends to filter.
    write!(out, "<form id=\"filters\" hidden>Show: ")?;
    for s in [Severity::Error, Severity::Warning, Severity::Info] {
        let n = severity_name(s);
        write!(
            out,
            "<label><input type=\"checkbox\" name=\"sev\" value=\"{n}\" checked> {n}</label> "
        )?;
    }
    write!(out, "<select name=\"check\"><option value=\"\">every check</option>")?;
    for c in &checks {
        write!(out, "<option value=\"{0}\">{0}</option>", c.id())?;
    }
    writeln!(out, "</select></form>\n<div id=\"findings-list\">")?;
    for c in &checks {
        check_section(out, *c, findings)?;
    }
    writeln!(out, "</div>")
}

fn check_section(out: &mut dyn Write, c: CheckId, findings: &[Finding]) -> io::Result<()> {
    let mine: Vec<&Finding> = findings.iter().filter(|f| f.check == c).collect();
    let worst = mine.iter().map(|f| f.severity).max().unwrap_or(c.severity());
    writeln!(
        out,
        "<section class=\"check {}\" id=\"check-{id}\" data-check=\"{id}\"><h3>{id} <small>({})</small></h3>",
        severity_name(worst),
        super::count(mine.len(), "finding", "findings"),
        id = c.id()
    )?;
    writeln!(
        out,
        "<p class=\"why\">{}</p>\n<p class=\"fix\">Fix: {}</p>",
        escape(c.why()),
        escape(c.fix())
    )?;
    writeln!(out, "<table class=\"findings\"><tbody>")?;
    // Findings are sorted by path: a file's findings of this check are
    // neighbours; one row per file and severity.
    let mut i = 0;
    while i < mine.len() {
        let (path, sev) = (&mine[i].path, mine[i].severity);
        let n = mine[i..].iter().take_while(|f| &f.path == path && f.severity == sev).count();
        let name = severity_name(sev);
        write!(
            out,
            "<tr class=\"{name}\"><td class=\"sev\">{name}</td><td class=\"file\">{}</td><td>",
            escape(&path.to_string_lossy())
        )?;
        for f in &mine[i..i + n] {
            write!(out, "<div>{}</div>", escape(&f.message))?;
        }
        writeln!(out, "</td></tr>")?;
        i += n;
    }
    writeln!(out, "</tbody></table></section>")
}

fn failures(out: &mut dyn Write, report: &Report<FileFacts>) -> io::Result<()> {
    if report.failures.is_empty() {
        return Ok(());
    }
    writeln!(out, "<h2 id=\"failures\">Not examined</h2>\n<ul>")?;
    for f in &report.failures {
        writeln!(out, "<li>{}</li>", escape(&f.to_string()))?;
    }
    writeln!(out, "</ul>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_controls_are_escaped() {
        assert_eq!(escape("<script>a'b\"&\n"), "&lt;script&gt;a&#39;b&quot;&amp;\u{fffd}");
        assert_eq!(command_line(&["x".into(), "a b".into(), "it's".into()]), "x 'a b' 'it'\\''s'");
    }

    #[test]
    fn the_page_is_whole_with_no_findings() {
        let report = Report::new(Vec::new(), Vec::new(), Vec::new(), 0);
        let mut out = Vec::new();
        write(&mut out, &report, &["cuda-elf-inspect".into()]).unwrap();
        let page = String::from_utf8(out).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
        assert!(page.contains("No file has device code.") && page.contains("No findings."));
    }
}
