//! The emitters of a coverage report ([`crate::audit::coverage::model`]):
//! text (a table, then one sentence per path: the answer to "what does
//! this cache hold for my GPUs"), JSON (the model itself: `--merge` reads it
//! back), Hydra metrics (hits, misses, bytes; names in
//! docs/binary-cache.md), and HTML (a matrix: a column per cache and per
//! requested capability). Every name from the input passes through the one
//! sanitiser (text) or [`super::html::escape`] (HTML).

use std::io::{self, Write};

use super::html::escape;
use crate::audit::coverage::model::{Answer, Gpu, PathResult, Report, Runs, Status};
use crate::output::{sanitize, Controls, Format};

/// Writes `report` in `format` (`sarif` and `github` have no coverage form:
/// the front end refuses them first).
pub fn write(out: &mut dyn Write, report: &Report, format: Format) -> io::Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, report)?;
            writeln!(out)
        }
        Format::HydraMetrics => metrics(out, report),
        Format::Html => html(out, report),
        _ => text(out, report),
    }
}

/// `1.2 GiB`, `300.0 MiB`, `12 B`: binary units, as Nix prints sizes.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// How a path is named: its attribute (and output when not `out`), else
/// its store path.
pub fn name(p: &PathResult) -> String {
    let shown = match (&p.attr, &p.output) {
        (Some(attr), Some(out)) if out != "out" => format!("{attr}.{out}"),
        (Some(attr), _) => attr.clone(),
        _ => p.path.clone(),
    };
    sanitize(&shown, Controls::Replace)
}

fn runs_words(runs: Runs) -> &'static str {
    match runs {
        Runs::Sass => "SASS",
        Runs::PtxJit => "PTX JIT only (slow first start)",
        Runs::Nothing => "nothing runs (no kernel image)",
        Runs::NoDeviceCode => "no device code needed",
    }
}

fn runs_letter(runs: Runs) -> &'static str {
    match runs {
        Runs::Sass => "S",
        Runs::PtxJit => "P",
        Runs::Nothing => "N",
        Runs::NoDeviceCode => "-",
    }
}

/// What the served build was made for: `built for 7.5 8.0 + PTX 9.0`.
fn built_for(gpu: &Gpu) -> String {
    if gpu.files == 0 {
        return "no device code".to_string();
    }
    match (gpu.built_for.is_empty(), gpu.ptx.is_empty()) {
        (false, true) => format!("built for {}", gpu.built_for.join(" ")),
        (false, false) => {
            format!("built for {} + PTX {}", gpu.built_for.join(" "), gpu.ptx.join(" "))
        }
        (true, _) => format!("no SASS, built for PTX {} only", gpu.ptx.join(" ")),
    }
}

/// Whether the run asked about a driver and no capabilities: each path is
/// answered for the capabilities its build was made for.
fn driver_only(report: &Report) -> bool {
    report.capabilities.is_empty() && report.driver.is_some()
}

/// With only a driver asked about: whether it runs every capability the
/// path was built for (`None`: nothing to say, no GPU answer or no code).
fn driver_verdict(p: &PathResult) -> Option<bool> {
    let verdicts = p.gpu.as_ref()?.capabilities.iter().filter_map(|c| c.driver_runs);
    verdicts.fold(None, |all, v| Some(all.unwrap_or(true) && v))
}

/// The letter of a path's cell for the requested capability `cap`.
fn cell_letter(p: &PathResult, cap: &str) -> &'static str {
    if p.not_examined.is_some() {
        return "?";
    }
    p.gpu
        .as_ref()
        .and_then(|g| g.capabilities.iter().find(|a| a.capability == cap))
        .map_or("-", |a| if a.driver_runs == Some(false) { "D" } else { runs_letter(a.runs) })
}

/// The one-line answer for a path.
pub fn sentence(p: &PathResult, report: &Report) -> String {
    let mut parts = Vec::new();
    match (&p.served_by, p.status) {
        (_, Status::NotDone) => parts.push("not asked (interrupted)".to_string()),
        (Some(url), _) => {
            let mut served = format!("served by {url} ({}", size(p.nar_size.unwrap_or(0)));
            if let Some(f) = p.file_size {
                served.push_str(&format!(", download {}", size(f)));
            }
            match &p.signed_by {
                Some(key) => served.push_str(&format!(", signed by {key})")),
                None => served.push_str(", signature not checked)"),
            }
            parts.push(served);
        }
        (None, _) => parts.push("served by no cache".to_string()),
    }
    if let Some(c) = &p.closure {
        let mut words = format!("closure {} paths, {}", c.paths, size(c.nar_size));
        if !c.missing.is_empty() {
            words.push_str(&format!(
                ", {} missing everywhere (partial hit): {}",
                c.missing.len(),
                c.missing.join(" ")
            ));
        }
        parts.push(words);
    }
    if let Some(why) = &p.not_examined {
        parts.push(format!("GPU depth not examined ({why})"));
    }
    if let Some(gpu) = &p.gpu {
        parts.push(built_for(gpu));
        let driver = report.driver.as_deref().unwrap_or("?");
        for c in &gpu.capabilities {
            let mut words = format!("on {}: {}", c.capability, runs_words(c.runs));
            match c.driver_runs {
                Some(false) if c.driver_reason.as_deref().is_none_or(|r| r == "unknown") => {
                    words
                        .push_str(&format!(", but whether driver {driver} runs it is not decided"));
                }
                Some(false) => {
                    let why = c.driver_reason.as_deref().unwrap_or("unknown");
                    words.push_str(&format!(", but driver {driver} cannot run it ({why})"));
                }
                // Only a driver asked about: its verdict is the answer.
                Some(true) if driver_only(report) => {
                    words.push_str(&format!(", driver {driver} runs it"))
                }
                _ => {}
            }
            parts.push(words);
        }
        if !gpu.newer_than_driver.is_empty() {
            parts.push(format!(
                "{} not answered: GPUs newer than driver {driver}",
                gpu.newer_than_driver.join(" ")
            ));
        }
        for f in &gpu.failures {
            parts.push(format!("not audited: {f}"));
        }
    }
    for a in p.caches.iter().filter(|a| a.answer == Answer::Served) {
        if p.served_by.as_deref() != Some(a.cache.as_str()) {
            parts.push(format!("also served by {}", a.cache));
        }
    }
    for a in p.caches.iter().filter(|a| a.answer != Answer::Served) {
        let reason = a.reason.as_deref().unwrap_or("");
        parts.push(format!("not served by {} ({}: {reason})", a.cache, answer_word(a.answer)));
    }
    sanitize(&format!("{}: {}", name(p), parts.join("; ")), Controls::Replace)
}

fn answer_word(a: Answer) -> &'static str {
    match a {
        Answer::Served => "served",
        Answer::NotFound => "not found",
        Answer::Untrusted => "not signed by a trusted key",
        Answer::BadNarinfo => "bad narinfo",
        Answer::Error => "error",
    }
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Served => "served",
        Status::Partial => "partial",
        Status::NotServed => "MISSING",
        Status::NotDone => "not done",
    }
}

/// The text report: caches, a table, the sentences, the counts.
fn text(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    writeln!(out, "Caches, in the order Nix asks them:")?;
    for (i, c) in report.caches.iter().enumerate() {
        let gone = c.unreachable.as_deref().map(|r| format!(", stopped answering: {r}"));
        let line =
            format!("  #{} {} (priority {}{})", i + 1, c.url, c.priority, gone.unwrap_or_default());
        writeln!(out, "{}", sanitize(&line, Controls::Replace))?;
    }
    let mut header = format!(
        "{:<32} {:<9} {:<6} {:>10} {:>10}",
        "ATTRIBUTE", "STATUS", "CACHE", "NAR", "DOWNLOAD"
    );
    for c in &report.capabilities {
        header.push_str(&format!(" {c:>5}"));
    }
    if driver_only(report) {
        header.push_str(&format!(" {:>6}", "DRIVER"));
    }
    writeln!(out, "\n{header}")?;
    for p in &report.paths {
        let cache = p
            .served_by
            .as_ref()
            .and_then(|u| report.caches.iter().position(|c| &c.url == u))
            .map_or("-".to_string(), |i| format!("#{}", i + 1));
        let mut row = format!(
            "{:<32} {:<9} {:<6} {:>10} {:>10}",
            name(p),
            status_word(p.status),
            cache,
            p.nar_size.map_or("-".into(), size),
            p.file_size.map_or("-".into(), size)
        );
        for c in &report.capabilities {
            row.push_str(&format!(" {:>5}", cell_letter(p, c)));
        }
        if driver_only(report) {
            let word = match (p.not_examined.is_some(), driver_verdict(p)) {
                (true, _) => "?",
                (_, Some(true)) => "runs",
                (_, Some(false)) => "FAILS",
                (_, None) => "-",
            };
            row.push_str(&format!(" {word:>6}"));
        }
        writeln!(out, "{row}")?;
    }
    writeln!(out)?;
    for p in &report.paths {
        writeln!(out, "{}", sentence(p, report))?;
    }
    for b in &report.bad_lines {
        writeln!(
            out,
            "{}",
            sanitize(&format!("input line {}: skipped: {}", b.line, b.reason), Controls::Replace)
        )?;
    }
    let s = &report.summary;
    write!(
        out,
        "\n{} paths: {} served, {} partial, {} not served, {} not done; {} of NAR, {} to download",
        s.paths,
        s.served,
        s.partial,
        s.not_served,
        s.not_done,
        size(s.nar_bytes),
        size(s.file_bytes)
    )?;
    if s.covered + s.not_covered > 0 {
        write!(out, "; {} covered, {} not covered", s.covered, s.not_covered)?;
    }
    if s.not_examined > 0 {
        write!(out, "; {} not examined (interrupted)", s.not_examined)?;
    }
    writeln!(out)
}

/// Hydra's metrics: `NAME VALUE [UNIT]`, names of `[a-zA-Z0-9._-]`.
fn metrics(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    let p = format!("{}.coverage", super::metrics::PREFIX);
    let s = &report.summary;
    writeln!(out, "{p}.paths {}", s.paths)?;
    writeln!(out, "{p}.hits {}", s.served + s.partial)?;
    writeln!(out, "{p}.misses {}", s.not_served)?;
    writeln!(out, "{p}.partial {}", s.partial)?;
    writeln!(out, "{p}.not-done {}", s.not_done)?;
    writeln!(out, "{p}.covered {}", s.covered)?;
    writeln!(out, "{p}.not-covered {}", s.not_covered)?;
    writeln!(out, "{p}.not-examined {}", s.not_examined)?;
    if report.driver.is_some() {
        // Paths whose code the driver runs on every capability answered.
        let verdicts: Vec<Option<bool>> = report.paths.iter().map(driver_verdict).collect();
        let count = |v| verdicts.iter().filter(|x| **x == Some(v)).count();
        writeln!(out, "{p}.driver.runs {}", count(true))?;
        writeln!(out, "{p}.driver.fails {}", count(false))?;
    }
    writeln!(out, "{p}.nar-bytes {} B", s.nar_bytes)?;
    writeln!(out, "{p}.download-bytes {} B", s.file_bytes)?;
    writeln!(out, "{p}.bad-lines {}", report.bad_lines.len())?;
    for (i, hits) in s.hits.iter().enumerate() {
        writeln!(out, "{p}.cache.{}.hits {hits}", i + 1)?;
    }
    for cap in &report.capabilities {
        let answers = || {
            report
                .paths
                .iter()
                .filter_map(|r| r.gpu.as_ref())
                .filter_map(|g| g.capabilities.iter().find(|c| &c.capability == cap))
        };
        let name: String = cap
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' })
            .collect();
        for (word, runs) in
            [("sass", Runs::Sass), ("ptx-jit", Runs::PtxJit), ("nothing", Runs::Nothing)]
        {
            writeln!(
                out,
                "{p}.capability.{name}.{word} {}",
                answers().filter(|a| a.runs == runs).count()
            )?;
        }
        let fails = answers().filter(|a| a.driver_runs == Some(false)).count();
        writeln!(out, "{p}.capability.{name}.driver-fails {fails}")?;
    }
    Ok(())
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em}\
table{border-collapse:collapse}th,td{padding:2px 8px;border:1px solid #ccc;text-align:left}\
td.served,td.sass,td.driver-runs{background:#b9e4bb}td.ptx-jit{background:#ffe9a6}\
td.not-found,td.nothing,td.error,td.bad-narinfo,td.untrusted,td.driver-fails{background:#f4a6a6}\
td.no-device-code,td.none,td.not-examined{color:#666}";

fn answer_class(a: Answer) -> &'static str {
    match a {
        Answer::Served => "served",
        Answer::NotFound => "not-found",
        Answer::Untrusted => "untrusted",
        Answer::BadNarinfo => "bad-narinfo",
        Answer::Error => "error",
    }
}

fn runs_class(r: Runs) -> &'static str {
    match r {
        Runs::Sass => "sass",
        Runs::PtxJit => "ptx-jit",
        Runs::Nothing => "nothing",
        Runs::NoDeviceCode => "no-device-code",
    }
}

/// One self-contained page: a row per path, a column per cache (its
/// answer) and per requested capability (what runs), the sentence as the
/// row's last cell.
fn html(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    writeln!(out, "<!DOCTYPE html><html><head><meta charset=\"utf-8\">\
        <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
        <title>Binary cache coverage</title><style>{STYLE}</style></head><body>")?;
    writeln!(
        out,
        "<h1>Binary cache coverage</h1><table class=\"matrix\"><thead><tr><th>attribute</th>"
    )?;
    // `data-cap` names every answer column: the caches, then the capabilities.
    for c in &report.caches {
        writeln!(out, "<th class=\"cache\" data-cap=\"{0}\">{0}</th>", escape(&c.url))?;
    }
    for c in &report.capabilities {
        writeln!(out, "<th class=\"req\" data-cap=\"{0}\">{0}</th>", escape(c))?;
    }
    if let (true, Some(d)) = (driver_only(report), &report.driver) {
        writeln!(out, "<th class=\"req\" data-cap=\"driver\">driver {}</th>", escape(d))?;
    }
    writeln!(out, "<th>answer</th></tr></thead><tbody>")?;
    for p in &report.paths {
        write!(
            out,
            "<tr data-path=\"{}\" data-status=\"{}\"><th scope=\"row\">{}</th>",
            escape(&p.path),
            status_word(p.status),
            escape(&name(p))
        )?;
        for c in &report.caches {
            match p.caches.iter().find(|a| a.cache == c.url) {
                Some(a) => write!(
                    out,
                    "<td class=\"{}\" title=\"{}\">{}</td>",
                    answer_class(a.answer),
                    escape(a.reason.as_deref().unwrap_or("")),
                    answer_word(a.answer)
                )?,
                None => write!(out, "<td class=\"none\">not asked</td>")?,
            }
        }
        for c in &report.capabilities {
            let a = p.gpu.as_ref().and_then(|g| g.capabilities.iter().find(|a| &a.capability == c));
            match a {
                _ if p.not_examined.is_some() => {
                    write!(out, "<td class=\"not-examined\">not examined</td>")?
                }
                Some(a) if a.driver_runs == Some(false) => {
                    write!(out, "<td class=\"driver-fails\">D</td>")?
                }
                Some(a) => write!(
                    out,
                    "<td class=\"{}\">{}</td>",
                    runs_class(a.runs),
                    runs_letter(a.runs)
                )?,
                None => write!(out, "<td class=\"none\">-</td>")?,
            }
        }
        if driver_only(report) {
            driver_cell(out, p)?;
        }
        writeln!(out, "<td>{}</td></tr>", escape(&sentence(p, report)))?;
    }
    writeln!(out, "</tbody></table>")?;
    let s = &report.summary;
    let examined = match s.not_examined {
        0 => String::new(),
        n => format!("; {n} not examined (interrupted)"),
    };
    writeln!(
        out,
        "<p id=\"summary\">{} paths: {} served, {} partial, {} not served, {} not done; {} of NAR, {} to download{examined}</p></body></html>",
        s.paths, s.served, s.partial, s.not_served, s.not_done, size(s.nar_bytes), size(s.file_bytes)
    )
}

/// With only a driver asked about, a path's driver cell: `driver-runs` or
/// `driver-fails`, the capabilities it was built for each with its verdict.
fn driver_cell(out: &mut dyn Write, p: &PathResult) -> io::Result<()> {
    if p.not_examined.is_some() {
        return write!(out, "<td class=\"not-examined\">not examined</td>");
    }
    let Some(all) = driver_verdict(p) else {
        return write!(out, "<td class=\"none\">-</td>");
    };
    let caps = p.gpu.iter().flat_map(|g| &g.capabilities);
    let words: Vec<String> = caps
        .filter_map(|c| {
            let verdict = match c.driver_runs? {
                true => "runs".to_string(),
                false => format!("fails ({})", c.driver_reason.as_deref().unwrap_or("unknown")),
            };
            Some(format!("{}: {verdict}", c.capability))
        })
        .collect();
    let class = if all { "driver-runs" } else { "driver-fails" };
    write!(out, "<td class=\"{class}\">{}</td>", escape(&words.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_binary_units() {
        assert_eq!(size(12), "12 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(1_288_490_189), "1.2 GiB");
    }
}
