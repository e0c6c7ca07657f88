//! Known NVIDIA library releases (`src/cuda/releases.tsv`, sources in
//! docs/driver-compatibility.md): libraries whose soname alone names the
//! CUDA major version that ships them (`libcufft.so.11`: cuFFT 11.x, CUDA
//! 12.0 to 12.9). Such a library needs a driver of that major, as a CUDA
//! runtime of that major does; it is how the driver verdict knows a
//! library that calls the driver itself and holds no runtime.

const TABLE_TEXT: &str = include_str!("releases.tsv");

fn table() -> &'static [(&'static str, u16)] {
    static TABLE: std::sync::OnceLock<Vec<(&'static str, u16)>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        TABLE_TEXT
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|line| match line.split('\t').collect::<Vec<_>>()[..] {
                [soname, major] => (soname, major.parse().unwrap_or(0)),
                // Our own data, checked by a unit test: a bad row is a build bug.
                _ => unreachable!("src/cuda/releases.tsv: malformed row: {line}"),
            })
            .collect()
    })
}

/// The soname as the table spells it and the CUDA major version that
/// ships the library of soname `soname`, when the table knows it.
pub fn of(soname: &str) -> Option<(&'static str, u16)> {
    table().iter().find(|(s, _)| *s == soname).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_table_is_well_formed() {
        assert!(table()
            .iter()
            .all(|(s, m)| s.starts_with("lib") && s.contains(".so.") && *m >= 11));
        assert_eq!(of("libcufft.so.11"), Some(("libcufft.so.11", 12)));
        assert_eq!(of("libcufft.so.10"), None);
        assert_eq!(of("libcurand.so.10"), None);
    }
}
