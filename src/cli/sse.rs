//! A minimal Server-Sent Events reader for the client subcommands: enough for gatehouse's own
//! frames (`event:`, `id:`, one `data:` line, comments).

use futures_util::StreamExt;

/// One frame.
#[derive(Debug, Default)]
pub struct Frame {
    pub event: Option<String>,
    pub id: Option<String>,
    pub data: Option<String>,
}

/// Reads frames off a streaming response until it ends.
pub struct Reader {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Reader {
    pub fn new(response: reqwest::Response) -> Self {
        Self { body: Box::pin(response.bytes_stream()), buf: Vec::new() }
    }

    /// The next frame that carries data or an event name; `None` when the stream ends.
    pub async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let text = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 2);
                let frame = parse(&text);
                if frame.event.is_some() || frame.data.is_some() {
                    return Some(frame);
                }
                continue;
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(_)) | None => return None,
            }
        }
    }
}

fn parse(text: &str) -> Frame {
    let mut frame = Frame::default();
    for line in text.lines() {
        let Some((field, value)) = line.split_once(':') else { continue };
        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
        match field {
            "event" => frame.event = Some(value),
            "id" => frame.id = Some(value),
            "data" => frame.data = Some(value),
            _ => {} // comments (`: ping`) and `retry:`
        }
    }
    frame
}
