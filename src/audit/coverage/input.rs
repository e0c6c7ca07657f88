//! What a coverage run asks about: store paths, one per line or argument,
//! or the JSON lines `nix-eval-jobs` prints (`attr`, `outputs` `{name:
//! path}`; `drvPath`, `system` and every other field are not needed). A line
//! that is not such an object is reported with its number and skipped, never
//! fatal: one broken attribute of a package set must not hide the rest.

use std::io::BufRead;

use super::model::BadLine;

/// One path to ask about, with the attribute it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The store path.
    pub path: String,
    /// The attribute (`--eval-jobs`).
    pub attr: Option<String>,
    /// The output's name.
    pub output: Option<String>,
}

/// The input: items in order, and the lines skipped.
#[derive(Debug, Default, Clone)]
pub struct Input {
    /// In the order given (an attribute's outputs in its `outputs` order).
    pub items: Vec<Item>,
    /// Lines that were not an attribute with outputs.
    pub bad_lines: Vec<BadLine>,
}

/// Store paths, as given (empty ones dropped).
pub fn store_paths(paths: impl IntoIterator<Item = String>) -> Input {
    let items = paths
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|path| Item { path, attr: None, output: None })
        .collect();
    Input { items, bad_lines: Vec::new() }
}

/// Reads `nix-eval-jobs` JSON lines.
pub fn eval_jobs(reader: impl BufRead) -> std::io::Result<Input> {
    let mut input = Input::default();
    for (i, line) in reader.split(b'\n').enumerate() {
        let line = line?;
        let number = i + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match eval_job(&line) {
            Ok(items) => input.items.extend(items),
            Err(reason) => input.bad_lines.push(BadLine { line: number, reason }),
        }
    }
    Ok(input)
}

/// One line's items, or why it is skipped.
fn eval_job(line: &[u8]) -> Result<Vec<Item>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let object = value.as_object().ok_or("not a JSON object")?;
    let attr = match object.get("attr") {
        Some(serde_json::Value::String(a)) => a.clone(),
        Some(_) => return Err("\"attr\" is not a string".into()),
        None => return Err("no \"attr\"".into()),
    };
    if let Some(error) = object.get("error").and_then(|e| e.as_str()) {
        let first = error.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        return Err(format!("{attr}: evaluation failed: {first}"));
    }
    let outputs = match object.get("outputs") {
        Some(serde_json::Value::Object(o)) if !o.is_empty() => o,
        Some(_) => return Err(format!("{attr}: \"outputs\" is not an object of paths")),
        None => return Err(format!("{attr}: no \"outputs\"")),
    };
    outputs
        .iter()
        .map(|(name, path)| match path.as_str() {
            Some(p) if p.starts_with('/') => Ok(Item {
                path: p.to_string(),
                attr: Some(attr.clone()),
                output: Some(name.clone()),
            }),
            _ => Err(format!("{attr}: output {name:?} is not a store path")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eval_jobs_lines_give_items_and_numbered_bad_lines() {
        let text = concat!(
            r#"{"attr":"torch","attrPath":["torch"],"drvPath":"/nix/store/x.drv","outputs":{"out":"/nix/store/a-torch","lib":"/nix/store/b-torch-lib"},"system":"x86_64-linux"}"#,
            "\n\nnot json\n",
            r#"{"attr":"broken","error":"error: undefined variable\n at x"}"#,
            "\n",
            r#"{"attr":"odd","outputs":{"out":3}}"#,
            "\n[1]\n"
        );
        let input = eval_jobs(text.as_bytes()).unwrap();
        let paths: Vec<_> = input.items.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(paths, ["/nix/store/a-torch", "/nix/store/b-torch-lib"]);
        assert_eq!(input.items[1].output.as_deref(), Some("lib"));
        let lines: Vec<usize> = input.bad_lines.iter().map(|b| b.line).collect();
        assert_eq!(lines, [3, 4, 5, 6]);
        assert!(input.bad_lines[1].reason.contains("broken: evaluation failed: error: undefined"));
    }
}
