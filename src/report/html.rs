//! `--format html`: one self-contained page (no network: inline style, one
//! small inline script, and a Content-Security-Policy that forbids loading
//! anything else). It holds the coverage matrix ([`super::matrix`], files
//! grouped by store path, a letter and a colour per cell, a legend), the
//! findings grouped by check with the check table's why and fix once,
//! filters by severity and check (the script; without it the page shows
//! everything; a URL fragment `#show=error,warning&check=ID` sets them, so
//! a filtered view can be linked), the failures, and the arguments, the
//! requested capabilities (and where they came from), the driver and the
//! version that made it.
//!
//! Every string from the input (file names, messages) goes through
//! [`sanitize`] (control characters replaced) and [`escape`] (markup
//! characters as entities), in text and in attributes alike: a file named
//! `<script>` shows as that text. Written straight to the writer, so 10,000
//! files stay a few megabytes and one pass.

use std::io::{self, Write};

use base64::Engine;
use sha2::{Digest, Sha256};

use super::matrix::{self, Cell, Column, Entry, Matrix};
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
.sass{background:#b9e4bb}.ptx{background:#ffe9a6}.driver-fails{background:#ffb38a}\
.link-stubs{background:#d9c6ec}.not-read{background:#d5d5d5}.nothing{background:#f4a6a6}\
td.unrequested{font-weight:normal;color:#666}.unrequested.sass{background:#e6f4e7}.unrequested.ptx{background:#fff6da}\
.unrequested.driver-fails{background:#ffe4d3}.unrequested.link-stubs{background:#efe7f6}\
.unrequested.not-read{background:#eee}.unrequested.nothing{background:#f7e9e9}\
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
/// the style rules act on (no walk over rows); then a walk over the
/// sections (one per check, a few dozen at most) hides those with nothing
/// shown and makes each heading count what it shows, from the section's
/// per-severity counts. The URL fragment (`#show=error,warning&check=ID`)
/// sets the filters on load and follows them.
const SCRIPT: &str = "(function(){var f=document.getElementById('filters'),l=document.getElementById('findings-list');\
if(!f||!l)return;f.hidden=false;var b=f.querySelectorAll('input[name=sev]'),q=f.querySelector('select'),\
ss=l.querySelectorAll('section[data-check]'),none=document.getElementById('none-shown');\
function apply(){var on={},c=q.value,any=false;b.forEach(function(i){on[i.value]=i.checked;l.classList.toggle('hide-'+i.value,!i.checked);});\
if(c)l.dataset.only=c;else delete l.dataset.only;\
ss.forEach(function(s){var n=0,t=0;['error','warning','info'].forEach(function(v){var k=+(s.dataset[v]||0);t+=k;if(on[v])n+=k;});\
s.hidden=n===0;if(n&&(!c||s.dataset.check===c))any=true;\
s.querySelector('.count').textContent=(n===t?'':n+' of ')+t+(t===1?' finding':' findings');});\
if(none)none.hidden=any;}\
function fromHash(){var p={};location.hash.slice(1).split('&').forEach(function(kv){var i=kv.indexOf('=');\
if(i>0)p[kv.slice(0,i)]=decodeURIComponent(kv.slice(i+1));});\
if('show' in p){var w=p.show.split(',');b.forEach(function(i){i.checked=w.indexOf(i.value)>=0;});}\
if('check' in p)q.value=p.check;apply();}\
f.addEventListener('change',function(){apply();var w=[];b.forEach(function(i){if(i.checked)w.push(i.value);});\
try{history.replaceState(null,'','#show='+w.join(',')+(q.value?'&check='+encodeURIComponent(q.value):''));}catch(e){}});\
window.addEventListener('hashchange',fromHash);fromHash();})();";

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
    // What could not be examined comes first: nothing below speaks for it.
    failures(&mut out, report)?;
    let m = matrix::build_for(&report.files, report.asked.driver.as_ref());
    coverage(&mut out, report, &m)?;
    findings(&mut out, &report.findings, report.summary.failures)?;
    writeln!(out, "<script>{SCRIPT}</script>\n</body>\n</html>")?;
    out.flush()
}

/// The command line shown, each argument quoted as a POSIX shell needs it
/// to read it back: as is when made only of characters no shell treats
/// specially, else in single quotes (a `'` inside as `'\\''`).
fn command_line(args: &[String]) -> String {
    args.iter().enumerate().map(|(i, a)| shell_quote(a, i == 0)).collect::<Vec<_>>().join(" ")
}

/// `a` as one shell word; `first`: the command's name, where `=` would make
/// an assignment.
fn shell_quote(a: &str, first: bool) -> String {
    let plain =
        |b: u8| b.is_ascii_alphanumeric() || b"-_./:,+@%^".contains(&b) || (b == b'=' && !first);
    if !a.is_empty() && a.bytes().all(plain) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
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
    asked(out, &report.asked)?;
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

/// The requested capabilities and where they came from, and the driver.
fn asked(out: &mut dyn Write, asked: &crate::audit::policy::Asked) -> io::Result<()> {
    match &asked.capabilities {
        Some((list, from)) => writeln!(
            out,
            "<p id=\"requested\">Requested capabilities: <code>{}</code> (from {})</p>",
            escape(list),
            escape(from)
        )?,
        None => writeln!(
            out,
            "<p id=\"requested\">No capability was requested (neither --cuda-capabilities nor $cudaCapabilities, $CUDAARCHS, $TORCH_CUDA_ARCH_LIST): nothing is checked against a list.</p>"
        )?,
    }
    if let Some(d) = &asked.driver {
        let name = match d.version {
            Some(v) => format!("driver {v} (CUDA {})", d.cuda),
            None => format!("a CUDA {} driver", d.cuda),
        };
        writeln!(
            out,
            "<p id=\"driver\">Judged on {name}: <code>D</code> cells are code it cannot run.</p>"
        )?;
    }
    Ok(())
}

/// The coverage part: the matrix and its legend, or why there is none.
fn coverage(out: &mut dyn Write, report: &Report<FileFacts>, m: &Matrix<'_>) -> io::Result<()> {
    writeln!(out, "<h2 id=\"coverage\">Coverage</h2>")?;
    if report.files.is_empty() {
        let failed = report.summary.failures;
        return writeln!(
            out,
            "<p id=\"no-files\">No file was examined: {}</p>",
            if failed > 0 {
                format!(
                    "{} (above).",
                    super::count(failed, "path could not be read", "paths could not be read")
                )
            } else {
                "the paths given hold no ELF file, archive, fatbin or cubin.".to_string()
            }
        );
    }
    if m.groups.is_empty() {
        writeln!(out, "<p id=\"no-device-code\">No file has device code.</p>")?;
    } else {
        legend(out, m)?;
        matrix_table(out, m)?;
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

/// The legend of the matrix shown: its letters, and the column marks that
/// occur (`*` requested, pale cells of capabilities nobody requested).
fn legend(out: &mut dyn Write, m: &Matrix<'_>) -> io::Result<()> {
    writeln!(out, "<table class=\"legend\"><caption>Legend</caption><tbody>")?;
    for c in Cell::LEGEND {
        writeln!(
            out,
            "<tr><td class=\"{}\">{}</td><td>{}</td></tr>",
            c.class(),
            c.letter(),
            escape(c.meaning())
        )?;
    }
    if let Some(c) = m.columns.iter().find(|c| c.requested) {
        writeln!(
            out,
            "<tr><td class=\"req\">{}*</td><td>a requested capability</td></tr>",
            escape(&c.name)
        )?;
    }
    if m.columns.iter().any(|c| !c.requested) {
        writeln!(
            out,
            "<tr><td class=\"nothing unrequested\">N</td><td>a pale cell: a capability nobody requested (a column without *), present in some file; the same letters, shown for information</td></tr>"
        )?;
    }
    writeln!(out, "</tbody></table>")
}

/// The cell's title (a column nobody requested says so by its header and
/// its pale cells, not in 190,000 titles at 10,000 files).
fn cell_title(column: &Column, e: &Entry) -> String {
    let what = match e.cell {
        Cell::Sass | Cell::SassDriverFails => "SASS",
        Cell::Ptx | Cell::PtxDriverFails => "PTX, JIT",
        Cell::LinkStubs => "link stubs only",
        Cell::NotRead => "device code not read",
        Cell::Nothing => "nothing runs",
    };
    let mut t = format!("{}: {what}", column.name);
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
    {
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
                "<td class=\"{}{}\" title=\"{}\">{}</td>",
                e.cell.class(),
                if c.requested { "" } else { " unrequested" },
                escape(&cell_title(c, e)),
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
fn findings(out: &mut dyn Write, findings: &[Finding], failed: usize) -> io::Result<()> {
    writeln!(out, "<h2 id=\"findings\">Findings</h2>")?;
    if findings.is_empty() {
        return if failed > 0 {
            writeln!(
                out,
                "<p id=\"no-findings\">No findings in the files examined; {} (above), so this is no clean bill.</p>",
                super::count(failed, "path was not examined", "paths were not examined")
            )
        } else {
            writeln!(out, "<p id=\"no-findings\">No findings.</p>")
        };
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
    writeln!(
        out,
        "</select></form>\n<p id=\"none-shown\" hidden>No finding matches the filters.</p>\n<div id=\"findings-list\">"
    )?;
    for c in &checks {
        check_section(out, *c, findings)?;
    }
    writeln!(out, "</div>")
}

fn check_section(out: &mut dyn Write, c: CheckId, findings: &[Finding]) -> io::Result<()> {
    let mine: Vec<&Finding> = findings.iter().filter(|f| f.check == c).collect();
    let worst = mine.iter().map(|f| f.severity).max().unwrap_or(c.severity());
    // Per-severity counts: the filter script hides a section with nothing
    // shown and counts what is, without walking the rows.
    let n = |s: Severity| mine.iter().filter(|f| f.severity == s).count();
    writeln!(
        out,
        "<section class=\"check {}\" id=\"check-{id}\" data-check=\"{id}\" data-error=\"{}\" data-warning=\"{}\" data-info=\"{}\"><h3>{id} <small>(<span class=\"count\">{}</span>)</small></h3>",
        severity_name(worst),
        n(Severity::Error),
        n(Severity::Warning),
        n(Severity::Info),
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
        let args = ["a=b", "--cuda-capabilities", "8.0;9.0", "k=v", "$x", "", "~"];
        assert_eq!(
            command_line(&args.map(String::from)),
            "'a=b' --cuda-capabilities '8.0;9.0' k=v '$x' '' '~'"
        );
    }

    #[test]
    fn the_page_is_whole_with_no_findings() {
        let report = Report::new(Vec::new(), Vec::new(), Vec::new(), 0);
        let mut out = Vec::new();
        write(&mut out, &report, &["cuda-elf-inspect".into()]).unwrap();
        let page = String::from_utf8(out).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
        assert!(page.contains("No file was examined") && page.contains("No findings."));
        assert!(!page.contains("Legend"), "a legend without a matrix");
    }
}
