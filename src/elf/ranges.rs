//! Overlapping section ranges, each byte read once.
//!
//! A section table is data the file's author wrote: nothing stops it from
//! holding 65,000 headers over one 64 KiB region. Every reader that walks
//! sections (dlopen notes and strings, fatbin sections, reference
//! locating) goes through [`Disjoint`], so that its work is bounded by the
//! file's bytes, not by its header count (issue 29).

/// Possibly overlapping ranges `[start, end)`, each with a value, cut into
/// disjoint pieces sorted by start: the range that starts first (the
/// earlier one given, on equal starts) owns the bytes they share, and a
/// later range keeps only its part past every earlier one's end. A range
/// inside another keeps nothing. For a real file (no overlap) the pieces
/// are the ranges themselves, sorted.
#[derive(Debug, Clone)]
pub struct Disjoint<T> {
    pieces: Vec<Piece<T>>,
    /// How many of the ranges given lost bytes to an earlier one.
    overlapping: usize,
}

/// One range's part that no earlier range holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece<T> {
    /// Where the range itself starts.
    pub range_start: u64,
    /// The first byte this piece owns (`>= range_start`).
    pub start: u64,
    /// One past its last byte (the range's own end).
    pub end: u64,
    /// The range's value.
    pub value: T,
}

impl<T> Disjoint<T> {
    /// Cuts `ranges` (`(start, end, value)`; an empty or inverted one is
    /// dropped) into pieces. `O(n log n)`.
    pub fn new(ranges: impl IntoIterator<Item = (u64, u64, T)>) -> Disjoint<T> {
        let mut all: Vec<(u64, u64, T)> = ranges.into_iter().filter(|r| r.0 < r.1).collect();
        all.sort_by_key(|r| r.0);
        let mut pieces = Vec::with_capacity(all.len());
        let (mut covered, mut overlapping) = (0u64, 0usize);
        for (range_start, end, value) in all {
            let start = range_start.max(covered);
            if start > range_start {
                overlapping += 1;
            }
            if start < end {
                pieces.push(Piece { range_start, start, end, value });
            }
            covered = covered.max(end);
        }
        Disjoint { pieces, overlapping }
    }

    /// The pieces, sorted by start, disjoint.
    pub fn pieces(&self) -> &[Piece<T>] {
        &self.pieces
    }

    /// Into the pieces.
    pub fn into_pieces(self) -> Vec<Piece<T>> {
        self.pieces
    }

    /// How many ranges shared bytes with an earlier one (wholly or in part).
    pub fn overlapping(&self) -> usize {
        self.overlapping
    }

    /// The piece holding byte `at`, if any: a binary search.
    pub fn find(&self, at: u64) -> Option<&Piece<T>> {
        let i = self.pieces.partition_point(|p| p.start <= at);
        let p = self.pieces.get(i.checked_sub(1)?)?;
        (at < p.end).then_some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::Disjoint;

    #[test]
    fn overlaps_are_owned_by_the_first_range_and_read_once() {
        let d =
            Disjoint::new([(10, 20, 'b'), (0, 10, 'a'), (0, 10, 'x'), (5, 30, 'c'), (12, 14, 'd')]);
        let got: Vec<(u64, u64, char)> =
            d.pieces().iter().map(|p| (p.start, p.end, p.value)).collect();
        assert_eq!(got, [(0, 10, 'a'), (10, 30, 'c')]);
        assert_eq!(d.overlapping(), 4);
        assert_eq!(d.find(0).map(|p| p.value), Some('a'));
        assert_eq!(d.find(29).map(|p| p.value), Some('c'));
        assert!(d.find(30).is_none());
        let gap = Disjoint::new([(0, 4, 1), (8, 9, 2)]);
        assert!(gap.find(5).is_none());
        assert_eq!(gap.find(8).map(|p| p.value), Some(2));
        assert_eq!(gap.overlapping(), 0);
        let total: u64 = Disjoint::new((0..65_000).map(|i| (i, i + 65_536, ())))
            .pieces()
            .iter()
            .map(|p| p.end - p.start)
            .sum();
        assert_eq!(total, 65_000 + 65_535);
    }
}
