//! How much one page of rows may hold, and filling a page from rows as they come.

/// How much one page of rows may hold: at most `rows` rows and about `bytes` bytes (by
/// `PageBytes`), but always at least one row, so the largest row fits any page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimit {
    pub rows: usize,
    pub bytes: usize,
}

impl PageLimit {
    /// Takes rows while they fit. The second value says whether rows were left over: for it to
    /// be right, the query must offer one row more than `rows` when more exist (`rows + 1`).
    pub(super) fn fill<T, E>(
        self,
        rows: impl IntoIterator<Item = Result<T, E>>,
        size: impl Fn(&T) -> usize,
    ) -> Result<(Vec<T>, bool), E> {
        let mut page = self.start();
        for row in rows {
            if !page.offer(row?, &size) {
                return Ok((page.rows, true));
            }
        }
        Ok((page.rows, false))
    }

    /// An empty page to `offer` rows to one at a time (rows that arrive from a stream).
    pub(super) fn start<T>(self) -> PageFill<T> {
        PageFill { limit: self, rows: Vec::new(), bytes: 0 }
    }

    /// The `LIMIT` that lets `fill` see whether more rows exist.
    pub(super) fn sql_limit(self) -> i64 {
        i64::try_from(self.rows).unwrap_or(i64::MAX - 1) + 1
    }
}

/// A page being filled.
pub(super) struct PageFill<T> {
    limit: PageLimit,
    pub(super) rows: Vec<T>,
    bytes: usize,
}

impl<T> PageFill<T> {
    /// Adds `row` if it fits; `false` (and the row dropped) when the page is full, which means
    /// more rows exist.
    pub(super) fn offer(&mut self, row: T, size: impl Fn(&T) -> usize) -> bool {
        let grown = self.bytes + size(&row);
        if self.rows.len() == self.limit.rows || (!self.rows.is_empty() && grown > self.limit.bytes) {
            return false;
        }
        self.bytes = grown;
        self.rows.push(row);
        true
    }
}
