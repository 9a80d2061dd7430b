//! Numbers written as text: one per line (`text`), or one column of comma-separated
//! values (`csv`, RFC 4180: fields may be quoted, with `""` for a quote and newlines
//! inside quotes). Their statistics are those of [`crate::stats`].
//!
//! A record belongs to the run that holds its first byte (S3 Select's rule). Each run
//! parses the records it holds whole and keeps the cut ones as **pieces**: the bytes
//! before its first record end (the end of a record that began earlier) and the bytes
//! after its last one; merging joins pieces that meet and parses the records they
//! complete, so every record counts once.
//!
//! Where a record ends depends on whether a newline is inside quotes, which depends on
//! every quote before it. Each run parses as if it started outside quotes and reports
//! whether it holds an odd number of quote characters. That guess is right unless a run
//! starts inside a quoted field, which happens exactly when some earlier run is odd; the
//! merged partial knows, and [`TextStats::finish`] then refuses with
//! [`Error::InOrder`]: the caller folds the object in order instead ([`TextFold`] over
//! the whole), and the answer is still exact. For numeric columns, quoted fields are short
//! and chunks are large, so that is rare; the cost report shows it when it happens.

use memchr::{memchr, memchr_iter};
use serde::{Deserialize, Serialize};

use crate::stats::{Column, Stats, StatsFold, StatsPartial};
use crate::{Error, Result};

/// Longest record taken, in bytes.
pub const MAX_RECORD: usize = 1 << 20;

/// The text layout of a `text` or `csv` statistics request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The column (0-based); None for `text`, one number per line.
    pub column: Option<usize>,
    /// The field delimiter.
    pub delimiter: u8,
    /// Whether quotes are honoured (`csv`).
    pub quoted: bool,
    /// Whether the object's first record is a header, skipped.
    pub header: bool,
}

/// Bytes of a record cut by the end of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// Object offset of the first byte.
    pub offset: u64,
    /// Whether the first byte starts a record.
    pub starts: bool,
    /// Whether the last byte ends a record.
    pub ends: bool,
    /// The bytes, base64.
    #[serde(with = "crate::b64")]
    pub bytes: Vec<u8>,
}

/// The partial result over some runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextPartial {
    /// The values' statistics.
    pub stats: StatsPartial,
    /// Records parsed (empty lines and the header left out).
    pub records: u64,
    /// Records whose field is not a number.
    pub invalid: u64,
    /// Records with too few fields for the column.
    pub missing: u64,
    /// Cut records, by offset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pieces: Vec<Piece>,
    /// Offsets of runs holding an odd number of quotes (at most two are kept: two
    /// already prove a guess wrong).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub odd_runs: Vec<u64>,
    /// The offset of the last run folded.
    pub last_run: u64,
}

/// Statistics over text numbers, planned for one object.
#[derive(Clone, Debug)]
pub struct TextStats {
    /// The statistics asked for.
    pub stats: Stats,
    /// How the numbers are written.
    pub layout: Layout,
    /// The object's length.
    pub object_len: u64,
}

impl TextStats {
    /// Statistics `stats` (a `text` or `csv` format) over an object of `object_len`
    /// bytes; None for the fixed-width formats.
    #[must_use]
    pub fn new(stats: &Stats, object_len: u64) -> Option<Self> {
        if !stats.format.is_text() {
            return None;
        }
        let csv = stats.format == crate::stats::Format::Csv;
        Some(Self {
            layout: Layout {
                // A name is resolved to its index before the plan is made (`header_index`);
                // one left over counts as no column, and every record reports it missing.
                column: csv.then_some(match &stats.column {
                    None => 0,
                    Some(Column::Index(i)) => *i,
                    Some(Column::Name(_)) => usize::MAX,
                }),
                delimiter: stats.delimiter.map_or(b',', |d| d as u8),
                quoted: csv,
                header: stats.header,
            },
            stats: stats.clone(),
            object_len,
        })
    }

    /// The partial of nothing.
    #[must_use]
    pub fn empty(&self) -> TextPartial {
        TextPartial {
            stats: self.stats.empty(),
            records: 0,
            invalid: 0,
            missing: 0,
            pieces: Vec::new(),
            odd_runs: Vec::new(),
            last_run: 0,
        }
    }

    /// The partial of one run, object bytes `offset..offset + bytes.len()`, parsed as if
    /// it started outside quotes.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when the run ends past the object.
    pub fn run(&self, offset: u64, bytes: &[u8]) -> Result<TextPartial> {
        if offset + bytes.len() as u64 > self.object_len {
            return Err(Error::BadArgument(format!(
                "bytes {offset}..{} are past the object's {}",
                offset + bytes.len() as u64,
                self.object_len
            )));
        }
        let mut fold = TextFold::new(self, offset, offset == 0);
        fold.update(bytes)?;
        let odd = self.layout.quoted && memchr_iter(b'"', bytes).count() % 2 == 1;
        let mut p = fold.finish()?;
        if odd {
            p.odd_runs.push(offset);
        }
        p.last_run = offset;
        Ok(p)
    }

    /// The partial of both: pieces that meet are joined and the records they complete
    /// parsed.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for a record longer than [`MAX_RECORD`].
    pub fn merge(&self, mut left: TextPartial, right: TextPartial) -> Result<TextPartial> {
        left.stats = self.stats.merge(left.stats, right.stats);
        left.records += right.records;
        left.invalid += right.invalid;
        left.missing += right.missing;
        left.odd_runs.extend(right.odd_runs);
        left.odd_runs.sort_unstable();
        left.odd_runs.truncate(2);
        left.last_run = left.last_run.max(right.last_run);
        left.pieces.extend(right.pieces);
        // An empty piece (a run's end on a record end) first: what follows at its offset
        // starts a record.
        left.pieces.sort_by_key(|p| (p.offset, !p.bytes.is_empty()));
        let mut joined: Vec<Piece> = Vec::with_capacity(left.pieces.len());
        for mut piece in std::mem::take(&mut left.pieces) {
            match joined.last_mut() {
                Some(last) if last.offset + last.bytes.len() as u64 == piece.offset => {
                    if last.ends {
                        piece.starts = true;
                        joined.push(piece);
                    } else {
                        last.bytes.extend_from_slice(&piece.bytes);
                        last.ends = piece.ends;
                    }
                }
                _ => joined.push(piece),
            }
        }
        let mut fold = Folder::new(self);
        for piece in joined {
            let end = piece.offset + piece.bytes.len() as u64;
            if piece.starts && (piece.ends || end == self.object_len) {
                if !piece.bytes.is_empty() {
                    fold.record(piece.offset, &piece.bytes);
                }
            } else if piece.bytes.len() > MAX_RECORD {
                return Err(too_long(piece.offset));
            } else {
                left.pieces.push(piece);
            }
        }
        let (stats, records, invalid, missing) = fold.finish();
        left.stats = self.stats.merge(left.stats, stats);
        left.records += records;
        left.invalid += invalid;
        left.missing += missing;
        Ok(left)
    }

    /// The answer: the statistics, and what was not a number.
    ///
    /// # Errors
    /// [`Error::InOrder`] when a run started inside a quoted field (fold the object in
    /// order instead); [`Error::Incomplete`] when a cut record was never completed;
    /// [`Error::BadArgument`] when no record has the column.
    pub fn finish(&self, p: &TextPartial) -> Result<serde_json::Value> {
        if p.odd_runs.len() >= 2 || p.odd_runs.first().is_some_and(|&o| p.last_run > o) {
            return Err(Error::InOrder(format!(
                "a quoted field crosses the run edge after offset {}",
                p.odd_runs[0]
            )));
        }
        if let Some(piece) = p.pieces.iter().find(|x| !x.bytes.is_empty()) {
            return Err(Error::Incomplete(format!(
                "a record cut at offset {} was never completed",
                piece.offset
            )));
        }
        if let Some(c) = self.layout.column
            && p.records > 0
            && p.missing == p.records
        {
            return Err(Error::BadArgument(format!(
                "column {c} does not exist: no record has {} fields",
                c.saturating_add(1)
            )));
        }
        let mut v = serde_json::to_value(self.stats.finish(&p.stats))
            .map_err(|e| Error::BadArgument(e.to_string()))?;
        v["records"] = p.records.into();
        v["invalid"] = p.invalid.into();
        v["missing"] = p.missing.into();
        Ok(v)
    }
}

/// Where a CSV's header names `name`: the index of that field in the object's first
/// record, read from `head` (the object's first bytes; `whole` when they are all of it).
///
/// # Errors
/// [`Error::BadArgument`] when no field is named so (the names are listed), or the first
/// record does not end within `head`.
pub fn header_index(head: &[u8], whole: bool, name: &str, delimiter: u8) -> Result<usize> {
    let mut inside = false;
    let end = head.iter().position(|&b| {
        if b == b'"' {
            inside = !inside;
        }
        b == b'\n' && !inside
    });
    let record = match end {
        Some(e) => &head[..e],
        None if whole => head,
        None => {
            return Err(Error::BadArgument(format!(
                "the header is longer than the {} bytes read for it",
                head.len()
            )));
        }
    };
    let record = record.strip_suffix(b"\r").unwrap_or(record);
    let mut names = Vec::new();
    for i in 0.. {
        let Some(f) = field(record, i, delimiter, true) else {
            break;
        };
        let t = f.trim_ascii();
        let t = t
            .strip_prefix(b"\"")
            .and_then(|x| x.strip_suffix(b"\""))
            .unwrap_or(t);
        let n = String::from_utf8_lossy(t).replace("\"\"", "\"");
        if n == name {
            return Ok(i);
        }
        names.push(n);
    }
    Err(Error::BadArgument(format!(
        "column {name:?} does not exist: the header names {names:?}"
    )))
}

fn too_long(offset: u64) -> Error {
    Error::BadArgument(format!(
        "a record at offset {offset} is longer than {MAX_RECORD} bytes"
    ))
}

/// Parses whole records into statistics.
struct Folder {
    text: TextStats,
    fold: StatsFold,
    records: u64,
    invalid: u64,
    missing: u64,
}

impl Folder {
    fn new(text: &TextStats) -> Self {
        Self {
            text: text.clone(),
            fold: text.stats.fold(0),
            records: 0,
            invalid: 0,
            missing: 0,
        }
    }

    /// One whole record at object offset `offset`, its ending newline included or not.
    fn record(&mut self, offset: u64, bytes: &[u8]) {
        let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || (offset == 0 && self.text.layout.header) {
            return;
        }
        self.records += 1;
        let field = match self.text.layout.column {
            None => Some(line),
            Some(c) => field(line, c, self.text.layout.delimiter, self.text.layout.quoted),
        };
        let Some(field) = field else {
            self.missing += 1;
            return;
        };
        match parse(field) {
            Some(v) => self.fold.value(v),
            None => self.invalid += 1,
        }
    }

    fn finish(self) -> (StatsPartial, u64, u64, u64) {
        (self.fold.finish(), self.records, self.invalid, self.missing)
    }
}

/// Field `c` of a record (quotes left on), or None when it has fewer fields.
fn field(line: &[u8], c: usize, delimiter: u8, quoted: bool) -> Option<&[u8]> {
    if !quoted || memchr(b'"', line).is_none() {
        return line.split(|&b| b == delimiter).nth(c);
    }
    let (mut start, mut n, mut inside) = (0, 0, false);
    for (i, &b) in line.iter().enumerate() {
        if b == b'"' {
            inside = !inside;
        } else if b == delimiter && !inside {
            if n == c {
                return Some(&line[start..i]);
            }
            n += 1;
            start = i + 1;
        }
    }
    (n == c).then(|| &line[start..])
}

/// A number, surrounding blanks and quotes removed.
fn parse(field: &[u8]) -> Option<f64> {
    let t = field.trim_ascii();
    let t = t
        .strip_prefix(b"\"")
        .and_then(|x| x.strip_suffix(b"\""))
        .map_or(t, <[u8]>::trim_ascii);
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// Text numbers folded in order, piece by piece: one run on a drive, or a whole object
/// where the split cannot be used.
pub struct TextFold {
    folder: Folder,
    /// Object offset of the next byte.
    at: u64,
    /// Object offset of `record`'s first byte.
    record_at: u64,
    /// The bytes of the record being read, when it spans pieces.
    record: Vec<u8>,
    /// Whether `record` starts a record (else it is the end of one begun before).
    starts: bool,
    inside: bool,
    pieces: Vec<Piece>,
}

impl TextFold {
    /// A fold from object offset `offset`; `starts` says whether a record starts there.
    #[must_use]
    pub fn new(text: &TextStats, offset: u64, starts: bool) -> Self {
        Self {
            folder: Folder::new(text),
            at: offset,
            record_at: offset,
            record: Vec::new(),
            starts,
            inside: false,
            pieces: Vec::new(),
        }
    }

    /// Folds the next bytes.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for a record longer than [`MAX_RECORD`].
    pub fn update(&mut self, bytes: &[u8]) -> Result<()> {
        let quoted = self.folder.text.layout.quoted && memchr(b'"', bytes).is_some();
        let mut from = 0;
        let mut end_at = |i: usize, this: &mut Self| -> Result<()> {
            let part = &bytes[from..=i];
            let offset = this.record_at;
            if this.record.is_empty() {
                this.end_record(offset, part)?;
            } else {
                let mut whole = std::mem::take(&mut this.record);
                whole.extend_from_slice(part);
                this.end_record(offset, &whole)?;
            }
            from = i + 1;
            this.record_at = this.at + from as u64;
            Ok(())
        };
        if quoted || self.inside {
            for (i, &b) in bytes.iter().enumerate() {
                if b == b'"' {
                    self.inside = !self.inside;
                } else if b == b'\n' && !self.inside {
                    end_at(i, self)?;
                }
            }
        } else {
            for i in memchr_iter(b'\n', bytes) {
                end_at(i, self)?;
            }
        }
        self.record.extend_from_slice(&bytes[from..]);
        if self.record.len() > MAX_RECORD {
            return Err(too_long(self.record_at));
        }
        self.at += bytes.len() as u64;
        Ok(())
    }

    fn end_record(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        if self.starts {
            self.folder.record(offset, bytes);
        } else {
            if bytes.len() > MAX_RECORD {
                return Err(too_long(offset));
            }
            self.pieces.push(Piece {
                offset,
                starts: false,
                ends: true,
                bytes: bytes.to_vec(),
            });
            self.starts = true;
        }
        Ok(())
    }

    /// The partial: the record still open is a piece, or the object's last record.
    ///
    /// # Errors
    /// None today; kept for records that fail late.
    pub fn finish(mut self) -> Result<TextPartial> {
        if self.starts && self.at == self.folder.text.object_len {
            if !self.record.is_empty() {
                let record = std::mem::take(&mut self.record);
                self.folder.record(self.record_at, &record);
            }
        } else if !self.record.is_empty() || self.starts {
            // Kept even when empty: it says the next run starts a record.
            self.pieces.push(Piece {
                offset: self.record_at,
                starts: self.starts,
                ends: false,
                bytes: std::mem::take(&mut self.record),
            });
        }
        let (stats, records, invalid, missing) = self.folder.finish();
        Ok(TextPartial {
            stats,
            records,
            invalid,
            missing,
            pieces: self.pieces,
            odd_runs: Vec::new(),
            last_run: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::stats::Format;

    fn csv(seed: u64, rows: usize) -> Vec<u8> {
        // One row with the column always, so that it exists (a column no row has is
        // refused, and tested apart).
        let mut out = b"id,name,value\n-1,first,0.25\n".to_vec();
        let mut x = seed | 1;
        for i in 0..rows {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x % 20_000).cast_signed() - 10_000;
            match x % 7 {
                // A quoted name with a delimiter, a quote and a newline in it.
                0 => out.extend_from_slice(format!("{i},\"a, \"\"b\"\"\nc\",{v}\n").as_bytes()),
                1 => out.extend_from_slice(format!("{i},plain,\"{v}\"\r\n").as_bytes()),
                2 => out.extend_from_slice(format!("{i},short\n").as_bytes()),
                3 => out.extend_from_slice(format!("{i},x,n/a\n\n").as_bytes()),
                _ => out.extend_from_slice(format!("{i},y,{v}.5\n").as_bytes()),
            }
        }
        out
    }

    fn plan(len: usize) -> TextStats {
        TextStats {
            stats: Stats::new(Format::Csv),
            layout: Layout {
                column: Some(2),
                delimiter: b',',
                quoted: true,
                header: true,
            },
            object_len: len as u64,
        }
    }

    /// Runs cut anywhere, merged: the single pass's answer, or a refusal that sends the
    /// caller to the fold in order, which gives it.
    #[test]
    fn known_csv() {
        let bytes = b"a,b\n1,\"x\ny\"\n2,3\n\"q\",5.5\n4,n/a\n9\n";
        let t = TextStats {
            stats: Stats::new(Format::Csv),
            layout: Layout {
                column: Some(1),
                delimiter: b',',
                quoted: true,
                header: true,
            },
            object_len: bytes.len() as u64,
        };
        let r = t.finish(&t.run(0, bytes).unwrap()).unwrap();
        assert_eq!(r["count"], 2, "{r}");
        assert_eq!(r["sum"], 8.5);
        assert_eq!(
            (&r["records"], &r["invalid"], &r["missing"]),
            (&5.into(), &2.into(), &1.into())
        );
        let mut missing = t.clone();
        missing.layout.column = Some(7);
        let err = missing.finish(&missing.run(0, bytes).unwrap()).unwrap_err();
        assert!(err.to_string().contains("column 7 does not exist"), "{err}");
    }

    #[test]
    fn header_names_find_their_columns() {
        let head = b"id,\"the, \"\"name\"\"\",temp\r\n1,x,2\n";
        assert_eq!(header_index(head, false, "temp", b',').unwrap(), 2);
        assert_eq!(header_index(head, false, "the, \"name\"", b',').unwrap(), 1);
        let e = header_index(head, false, "nope", b',').unwrap_err();
        assert!(
            e.to_string().contains(r#"["id", "the, \"name\"", "temp"]"#),
            "{e}"
        );
        assert_eq!(header_index(b"a;b", true, "b", b';').unwrap(), 1);
        assert!(header_index(b"a;b", false, "b", b';').is_err());
    }

    proptest! {
        #[test]
        fn runs_merge_to_one_pass(seed: u64, rows in 0usize..300, cuts in prop::collection::vec(0usize..20_000, 0..8)) {
            let bytes = csv(seed, rows);
            let t = plan(bytes.len());
            let one = t.finish(&t.run(0, &bytes).unwrap()).unwrap();
            let mut bounds: Vec<usize> = cuts.into_iter().filter(|&c| c < bytes.len()).collect();
            bounds.extend([0, bytes.len()]);
            bounds.sort_unstable();
            bounds.dedup();
            let merged = bounds.windows(2).rev().map(|r| t.run(r[0] as u64, &bytes[r[0]..r[1]]).unwrap())
                .try_fold(t.empty(), |a, b| t.merge(a, b)).unwrap();
            match t.finish(&merged) {
                Ok(r) => prop_assert!(crate::op::results_agree(&r, &one), "{} vs {}", r, one),
                Err(Error::InOrder(_)) => {
                    // In order, in pieces cut anywhere: the same answer.
                    let mut f = TextFold::new(&t, 0, true);
                    for r in bounds.windows(2) {
                        f.update(&bytes[r[0]..r[1]]).unwrap();
                    }
                    let r = t.finish(&f.finish().unwrap()).unwrap();
                    prop_assert!(crate::op::results_agree(&r, &one));
                }
                Err(e) => prop_assert!(false, "{}", e),
            }
        }

        /// One number per line: runs never need the fold in order.
        #[test]
        fn text_lines_merge_exactly(values in prop::collection::vec(-1000i32..1000, 0..500), cuts in prop::collection::vec(0usize..4000, 0..8)) {
            let bytes: Vec<u8> = values.iter().flat_map(|v| format!("{v}\n").into_bytes()).collect();
            let t = TextStats { stats: Stats::new(Format::Text), layout: Layout { column: None, delimiter: b',', quoted: false, header: false }, object_len: bytes.len() as u64 };
            let mut bounds: Vec<usize> = cuts.into_iter().filter(|&c| c < bytes.len()).collect();
            bounds.extend([0, bytes.len()]);
            bounds.sort_unstable();
            bounds.dedup();
            let merged = bounds.windows(2).map(|r| t.run(r[0] as u64, &bytes[r[0]..r[1]]).unwrap())
                .try_fold(t.empty(), |a, b| t.merge(a, b)).unwrap();
            let r = t.finish(&merged).unwrap();
            prop_assert_eq!(r["count"].as_u64().unwrap(), values.len() as u64);
            // Small integers: their float sum is exact.
            let sum: i32 = values.iter().sum();
            prop_assert_eq!(r["sum"].as_f64().unwrap().to_string(), f64::from(sum).to_string());
        }
    }
}
