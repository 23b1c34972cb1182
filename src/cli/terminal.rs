//! What may reach a terminal. Questions, choices, answers and principals come from other people;
//! written raw, their control characters would drive the terminal (an OSC 52 sequence sets the
//! clipboard, a CR or bidi override makes a line read as something else). Every such text passes
//! through [`escape`] on its way to a person.

use std::borrow::Cow;

/// Whether newlines and tabs pass as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// For text shown on its own lines (an answer): newlines and tabs are the person's layout.
    Keep,
    /// For text inside one line (a table cell, a message): they are escaped too.
    Escape,
}

/// `text` with every character that could control a terminal shown as an escape: `\n`, `\r`,
/// `\t`, and `\u{…}` for the rest (C0 and C1 controls with ESC and DEL among them, bidi
/// embeddings, overrides, isolates and marks, line and paragraph separators). Everything else,
/// backslashes included, is left as it is: this is for reading, not for parsing back.
pub fn escape(text: &str, lines: Lines) -> Cow<'_, str> {
    let unsafe_here = |c: char| controls_terminal(c) && !(lines == Lines::Keep && matches!(c, '\n' | '\t'));
    if !text.chars().any(unsafe_here) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !unsafe_here(c) => shown.push(c),
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c => shown.extend(c.escape_unicode()),
        }
    }
    Cow::Owned(shown)
}

/// Text from the server or the command line, escaped for one line of the terminal.
pub fn quote(text: &str) -> String {
    escape(text, Lines::Escape).into_owned()
}

/// Serialized JSON with the same characters written as JSON `\uXXXX` escapes: the same value for
/// a JSON reader, nothing for a terminal to act on. (A serializer already escapes C0 controls
/// inside strings; the rest can only occur inside strings, so escaping them keeps the JSON valid.)
pub fn escape_json(json: &str) -> Cow<'_, str> {
    let unsafe_here = |c: char| controls_terminal(c) && (c == '\u{7f}' || !c.is_ascii());
    if !json.chars().any(unsafe_here) {
        return Cow::Borrowed(json);
    }
    let mut shown = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_here(c) {
            // Every such character is in the Basic Multilingual Plane: one `\uXXXX` each.
            shown.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

/// C0, DEL and C1 (Unicode's `Cc`), the bidi formatting characters (Trojan Source,
/// CVE-2021-42574) and the line and paragraph separators some terminals break lines at.
fn controls_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        || matches!(c, '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_passes_unchanged_and_unallocated() {
        for text in ["Deploy to prod?", "naïve café – 日本語 🚀 👨‍👩‍👧", r"C:\path\x1b", ""] {
            assert!(matches!(escape(text, Lines::Escape), Cow::Borrowed(t) if t == text), "{text:?}");
            assert!(matches!(escape_json(text), Cow::Borrowed(_)), "{text:?}");
        }
    }

    #[test]
    fn escape_sequences_lose_their_escape() {
        // OSC 52 (set the clipboard), a CSI colour, an 8-bit CSI (C1) and a bell.
        let osc52 = "copy \u{1b}]52;c;ZWNobyBwd25lZA==\u{7} this";
        assert_eq!(escape(osc52, Lines::Keep), "copy \\u{1b}]52;c;ZWNobyBwd25lZA==\\u{7} this");
        assert_eq!(escape("\u{1b}[31mred\u{1b}[0m", Lines::Keep), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(escape("\u{9b}2J\u{9d}x", Lines::Keep), "\\u{9b}2J\\u{9d}x");
        assert_eq!(escape("nul\0 del\u{7f}", Lines::Keep), "nul\\u{0} del\\u{7f}");
    }

    #[test]
    fn bidi_controls_and_separators_are_shown() {
        let trojan = "yes\u{202e}on\u{202c} \u{2066}a\u{2069} \u{200f}\u{061c}";
        assert_eq!(escape(trojan, Lines::Keep), "yes\\u{202e}on\\u{202c} \\u{2066}a\\u{2069} \\u{200f}\\u{61c}");
        assert_eq!(escape("a\u{2028}b\u{2029}", Lines::Keep), "a\\u{2028}b\\u{2029}");
    }

    #[test]
    fn newlines_and_tabs_pass_only_when_kept() {
        let text = "line one\n\tindented\r\nover";
        assert_eq!(escape(text, Lines::Keep), "line one\n\tindented\\r\nover", "a CR never passes");
        assert_eq!(escape(text, Lines::Escape), "line one\\n\\tindented\\r\\nover");
    }

    #[test]
    fn every_control_character_is_escaped() {
        for c in (0..=0x9f_u32).filter_map(char::from_u32).filter(|c| c.is_control()) {
            let shown = escape(&c.to_string(), Lines::Escape).into_owned();
            assert!(shown.starts_with('\\') && shown.chars().all(|c| c.is_ascii_graphic()), "{c:?} -> {shown:?}");
        }
    }

    #[test]
    fn json_keeps_its_value() {
        let value = serde_json::json!({"answer": "a\u{1b}]52;c;x\u{7}\u{202e}b\u{7f}\u{85}", "note": "é\n"});
        let json = value.to_string();
        let safe = escape_json(&json);
        assert!(!safe.chars().any(controls_terminal), "{safe}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), value);
        assert!(safe.contains("\\u202e") && safe.contains("\\u007f") && safe.contains("\\u0085") && safe.contains('é'));
    }
}
