//! CSV records written straight into the caller's buffer, byte for byte as the `csv`
//! crate writes them with `QuoteStyle::Necessary` and CRLF terminators (a test
//! compares the two): RFC 4180, a cell quoted only when it holds a comma, a quote, CR
//! or LF, quotes doubled inside, and a record of no bytes at all (one empty cell)
//! written as `""` so that it is not read as a blank line. Going through
//! `csv::Writer` cost a copy of every byte into its buffer and out of it again, and
//! its per-field bookkeeping: ~9 % of an export's CPU (docs/PERFORMANCE.md, "Cells
//! checked once a statement").

use super::manifest::CsvCells;

/// One record being appended to `out`.
pub struct Record<'a> {
    out: &'a mut Vec<u8>,
    cells: CsvCells,
    start: usize,
    first: bool,
}

impl<'a> Record<'a> {
    /// Starts a record at the end of `out`, its cells written as `cells` says.
    pub fn start(out: &'a mut Vec<u8>, cells: CsvCells) -> Self {
        let start = out.len();
        Record {
            out,
            cells,
            start,
            first: true,
        }
    }

    /// Appends the next cell.
    pub fn cell(&mut self, cell: &str) {
        if !std::mem::replace(&mut self.first, false) {
            self.out.push(b',');
        }
        let mark = self.cells.mark(cell);
        let bytes = cell.as_bytes();
        if !needs_quotes(bytes) {
            self.out.extend_from_slice(mark.as_bytes());
            self.out.extend_from_slice(bytes);
            return;
        }
        self.out.push(b'"');
        self.out.extend_from_slice(mark.as_bytes());
        // `str::split` finds a char with memchr, not byte by byte: a JSON cell is
        // most of a row's bytes, and every one of them is quoted.
        let mut parts = cell.split('"');
        if let Some(first) = parts.next() {
            self.out.extend_from_slice(first.as_bytes());
        }
        for part in parts {
            self.out.extend_from_slice(b"\"\"");
            self.out.extend_from_slice(part.as_bytes());
        }
        self.out.push(b'"');
    }

    /// Ends the record with CRLF.
    pub fn end(self) {
        if self.out.len() == self.start {
            self.out.extend_from_slice(b"\"\"");
        }
        self.out.extend_from_slice(b"\r\n");
    }
}

/// Whether a cell holds a comma, a quote, CR or LF. Looked at 32 bytes at a time
/// without stopping inside a block, which the compiler turns into vector compares:
/// a byte-by-byte search that stops at the first hit cannot be, and every cell of
/// every row passes here (four 64-digit hashes a row, which hold none).
fn needs_quotes(bytes: &[u8]) -> bool {
    let special = |b: u8| (b == b',') | (b == b'"') | (b == b'\r') | (b == b'\n');
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        if block.iter().fold(false, |hit, &b| hit | special(b)) {
            return true;
        }
    }
    blocks.remainder().iter().any(|&b| special(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the `csv` crate writes for `fields`, configured as the export was.
    fn csv_crate(fields: &[&str]) -> Vec<u8> {
        let mut w = csv::WriterBuilder::new()
            .terminator(csv::Terminator::CRLF)
            .quote_style(csv::QuoteStyle::Necessary)
            .flexible(true)
            .from_writer(Vec::new());
        w.write_record(fields).unwrap();
        w.into_inner().unwrap()
    }

    fn direct(fields: &[&str]) -> Vec<u8> {
        let mut out = b"before".to_vec();
        let mut record = Record::start(&mut out, CsvCells::Raw);
        for f in fields {
            record.cell(f);
        }
        record.end();
        out.split_off(6)
    }

    const TRICKY: [&str; 16] = [
        "",
        "plain",
        "\"",
        "say \"hi\"",
        "a,b",
        ",",
        "\r",
        "\n",
        "one\r\ntwo",
        "=1+1",
        "+1",
        "-1",
        "@sum",
        "søren — €",
        " spaced ",
        "'quoted",
    ];

    #[test]
    fn a_special_byte_is_found_at_any_place_in_a_cell_of_any_length() {
        for len in 0..100 {
            assert!(!needs_quotes("a".repeat(len).as_bytes()), "{len}");
            for at in 0..len {
                for special in [b',', b'"', b'\r', b'\n'] {
                    let mut cell = vec![b'a'; len];
                    cell[at] = special;
                    assert!(needs_quotes(&cell), "{len} {at} {special}");
                }
            }
        }
    }

    #[test]
    fn tricky_cells_are_written_as_the_csv_crate_writes_them() {
        for cell in TRICKY {
            assert_eq!(direct(&[cell]), csv_crate(&[cell]), "{cell:?}");
            assert_eq!(direct(&[cell, cell]), csv_crate(&[cell, cell]), "{cell:?}");
            assert_eq!(direct(&["x", cell]), csv_crate(&["x", cell]), "{cell:?}");
        }
        assert_eq!(direct(&TRICKY), csv_crate(&TRICKY));
    }

    #[test]
    fn a_record_of_one_empty_cell_is_two_quotes_and_of_no_cells_too() {
        assert_eq!(direct(&[""]), b"\"\"\r\n");
        assert_eq!(direct(&[]), csv_crate(&[]));
        assert_eq!(direct(&["", ""]), b",\r\n");
        assert_eq!(direct(&["", "x"]), b",x\r\n");
    }

    #[test]
    fn random_records_are_written_as_the_csv_crate_writes_them() {
        // Cells drawn from the bytes that matter to quoting and neutralising, and
        // a multi-byte character.
        const PIECES: [&str; 12] = [
            "a", ",", "\"", "\r", "\n", "=", "+", "-", "@", "'", "\t", "é",
        ];
        for _ in 0..2_000 {
            let fields: Vec<String> = (0..rand::random_range(1..5))
                .map(|_| {
                    (0..rand::random_range(0..6))
                        .map(|_| PIECES[rand::random_range(0..PIECES.len())])
                        .collect()
                })
                .collect();
            let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
            assert_eq!(direct(&fields), csv_crate(&fields), "{fields:?}");
        }
    }

    #[test]
    fn neutralised_cells_get_their_mark_inside_the_quotes() {
        for cell in TRICKY {
            let mut out = Vec::new();
            let mut record = Record::start(&mut out, CsvCells::Neutralised);
            record.cell(cell);
            record.cell(cell);
            record.end();
            let written = format!("{}{cell}", CsvCells::Neutralised.mark(cell));
            assert_eq!(out, csv_crate(&[&written, &written]), "{cell:?}");
        }
    }
}
