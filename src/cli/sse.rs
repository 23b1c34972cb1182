//! The client subcommands' Server-Sent Events reader: the WHATWG "event stream interpretation"
//! (HTML Living Standard §9.2.6) over the bytes of a streaming response, whatever the chunking.

use std::collections::VecDeque;

use futures_util::StreamExt;

/// One dispatched event, as an `EventSource` would see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The `event:` field, `message` when the event named none.
    pub event: String,
    /// The last event id seen on the stream (ids carry over to later events, as in a browser).
    pub id: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Turns bytes, fed in chunks of any size, into events.
#[derive(Debug, Default)]
pub struct Parser {
    /// The bytes of the line not yet ended.
    line: Vec<u8>,
    /// The last line ended with a CR: an LF that comes next (perhaps in the next chunk) belongs
    /// to the same line end.
    after_cr: bool,
    /// Past the first line, where a byte order mark would be.
    past_first_line: bool,
    event: String,
    data: String,
    last_id: String,
}

impl Parser {
    /// Feeds one chunk; events it completes go to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut VecDeque<Frame>) {
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\r' | b'\n' => {
                    self.after_cr = byte == b'\r';
                    self.end_line(out);
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(byte);
                }
            }
        }
    }

    fn end_line(&mut self, out: &mut VecDeque<Frame>) {
        let mut line = std::mem::take(&mut self.line);
        if !std::mem::replace(&mut self.past_first_line, true) && line.starts_with("\u{feff}".as_bytes()) {
            line.drain(..3);
        }
        // Line ends are ASCII, so a complete line never splits a UTF-8 sequence.
        let line = String::from_utf8_lossy(&line);
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some(("", _)) => return, // a comment, such as the server's `: ping`
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => value.clone_into(&mut self.last_id),
            // `retry` would set a browser's reconnection delay; the CLI keeps its own backoff.
            // Every other field is ignored, as the standard says.
            _ => {}
        }
    }

    /// A blank line: the event so far is complete, unless it carried no data.
    fn dispatch(&mut self, out: &mut VecDeque<Frame>) {
        let event = std::mem::take(&mut self.event);
        let mut data = std::mem::take(&mut self.data);
        if data.is_empty() {
            return;
        }
        data.pop(); // the `\n` after the last data line
        let event = if event.is_empty() { "message".to_owned() } else { event };
        out.push_back(Frame { event, id: self.last_id.clone(), data });
    }
}

/// Reads events off a streaming response until it ends.
pub struct Reader {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    parser: Parser,
    ready: VecDeque<Frame>,
}

impl Reader {
    pub fn new(response: reqwest::Response) -> Self {
        Self { body: Box::pin(response.bytes_stream()), parser: Parser::default(), ready: VecDeque::new() }
    }

    /// The next event; `None` when the stream ends or fails (an event cut off by the end is
    /// dropped, as the standard says).
    pub async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Some(frame);
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.parser.feed(&chunk, &mut self.ready),
                Some(Err(_)) | None => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(event: &str, id: &str, data: &str) -> Frame {
        Frame { event: event.into(), id: id.into(), data: data.into() }
    }

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<Frame> {
        let mut parser = Parser::default();
        let mut out = VecDeque::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out);
        }
        out.into()
    }

    /// Parses `bytes` whole, split in two at every position, and one byte at a time; every way
    /// gives `expected`.
    fn assert_parses(bytes: &[u8], expected: &[Frame]) {
        assert_eq!(parse_chunks(&[bytes]), expected, "whole: {:?}", String::from_utf8_lossy(bytes));
        for split in 0..=bytes.len() {
            let (head, tail) = bytes.split_at(split);
            assert_eq!(parse_chunks(&[head, tail]), expected, "split at {split}: {:?}", String::from_utf8_lossy(bytes));
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse_chunks(&bytewise), expected, "byte by byte");
    }

    #[test]
    fn gatehouse_frames_and_pings() {
        assert_parses(
            b": ping\n\nevent: enduring\nid: 7\ndata: {\"v\":1}\n\n: ping\n\nevent: reset\ndata: {\"head\":9}\n\n",
            &[frame("enduring", "7", "{\"v\":1}"), frame("reset", "7", "{\"head\":9}")],
        );
    }

    #[test]
    fn every_line_end() {
        let expected = [frame("a", "1", "x"), frame("message", "1", "y")];
        assert_parses(b"event: a\r\nid: 1\r\ndata: x\r\n\r\ndata: y\r\n\r\n", &expected);
        assert_parses(b"event: a\rid: 1\rdata: x\r\rdata: y\r\r", &expected);
        assert_parses(b"event: a\nid: 1\r\ndata: x\r\n\rdata: y\n\r\n", &expected);
    }

    #[test]
    fn a_cr_lf_split_across_chunks_is_one_line_end() {
        // Were the LF a second line end, it would dispatch the event before its data line.
        assert_eq!(
            parse_chunks(&[b"event: a\r", b"\ndata: x\r", b"\n\r", b"\n"]),
            [frame("a", "", "x")],
            "CR at a chunk's end, LF at the next one's start"
        );
        assert_eq!(parse_chunks(&[b"data: x\r", b"\r"]), [frame("message", "", "x")], "CR CR is two line ends");
    }

    #[test]
    fn data_lines_join_with_newlines() {
        assert_parses(b"data: one\ndata:two\ndata\ndata:  three\n\n", &[frame("message", "", "one\ntwo\n\n three")]);
        assert_parses(b"data\n\n", &[frame("message", "", "")]);
    }

    #[test]
    fn comments_unknown_fields_and_empty_events_are_ignored() {
        assert_parses(
            b":comment\nretry: 100\nfoo: bar\nDATA: shouted\nevent: named\n\n\n\ndata: kept\nbar\n\n",
            &[frame("message", "", "kept")],
        );
    }

    #[test]
    fn ids_carry_over_and_an_id_with_nul_is_ignored() {
        assert_parses(
            b"id: 1\ndata: a\n\ndata: b\n\nid: 2\0x\ndata: c\n\nid\ndata: d\n\n",
            &[
                frame("message", "1", "a"),
                frame("message", "1", "b"),
                frame("message", "1", "c"),
                frame("message", "", "d"),
            ],
        );
    }

    #[test]
    fn one_leading_space_is_stripped_and_a_bom_skipped() {
        assert_parses(b"\xEF\xBB\xBFdata:  two spaces \n\n", &[frame("message", "", " two spaces ")]);
        assert_parses("data: é ünï\u{feff}\n\n".as_bytes(), &[frame("message", "", "é ünï\u{feff}")]);
    }

    #[test]
    fn an_event_cut_off_by_the_end_is_not_dispatched() {
        assert_parses(b"data: done\n\ndata: cut", &[frame("message", "", "done")]);
        assert_parses(b"data: done\n\ndata: cut\n", &[frame("message", "", "done")]);
    }
}
