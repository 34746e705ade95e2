//! The text of a page, from the DOM the browser serialised after loading it.
//!
//! The browser already ran the page's scripts, so the DOM is the page as shown; what is left
//! is to drop markup: the contents of `script`, `style`, `noscript`, `template` and `head`
//! (except the title) are not text; block elements and `br` end a line; character
//! references are decoded; runs of spaces collapse. Pure, total (any input gives an
//! answer), linear in the input.

/// A page's title and text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PageText {
    pub title: Option<String>,
    pub text: String,
}

/// Elements whose content is never text.
const HIDDEN: &[&str] = &["script", "style", "noscript", "template", "head"];
/// Elements that start and end a line.
const BLOCK: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "details",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "summary",
    "table",
    "tr",
    "ul",
];
/// Elements whose content is raw text up to their end tag (markup inside is not markup).
const RAW: &[&str] = &["script", "style", "textarea", "title"];

/// Extracts the title and the text of a serialised DOM.
pub fn page_text(dom: &str) -> PageText {
    let mut out = Builder::default();
    let mut title: Option<String> = None;
    let mut hidden = 0usize;
    let mut rest = dom;
    while let Some(lt) = rest.find('<') {
        let (before, after) = rest.split_at(lt);
        if hidden == 0 {
            out.push_text(&decode(before));
        }
        if let Some(comment) = after.strip_prefix("<!--") {
            rest = comment.find("-->").map_or("", |e| &comment[e + 3..]);
            continue;
        }
        let Some(tag) = Tag::parse(after) else {
            // A lone `<`: text.
            if hidden == 0 {
                out.push_text("<");
            }
            rest = &after[1..];
            continue;
        };
        rest = &after[tag.len..];
        if tag.name.is_empty() {
            continue; // <!doctype>, <?...>
        }
        if !tag.closing && RAW.contains(&tag.name.as_str()) {
            let end = find_end_tag(rest, &tag.name);
            let body = &rest[..end];
            if tag.name == "title" && title.is_none() {
                let t = collapse(&decode(body));
                if !t.is_empty() {
                    title = Some(t);
                }
            } else if tag.name == "textarea" && hidden == 0 {
                out.push_text(&decode(body));
            }
            rest = &rest[end..];
            rest = rest.find('>').map_or("", |g| &rest[g + 1..]);
            continue;
        }
        if HIDDEN.contains(&tag.name.as_str()) && !tag.self_closing {
            if tag.closing {
                hidden = hidden.saturating_sub(1);
            } else {
                hidden += 1;
            }
            continue;
        }
        if hidden == 0 {
            if BLOCK.contains(&tag.name.as_str()) {
                out.line_break();
            } else if matches!(tag.name.as_str(), "td" | "th") && !tag.closing {
                out.push_text(" ");
            }
        }
    }
    if hidden == 0 {
        out.push_text(&decode(rest));
    }
    PageText {
        title,
        text: out.finish(),
    }
}

/// One tag: its lowercase name, whether it closes, and its length in the input.
struct Tag {
    name: String,
    closing: bool,
    self_closing: bool,
    len: usize,
}

impl Tag {
    /// `s` starts with `<`. `None` when it is not a tag (a `<` followed by a space, ...).
    fn parse(s: &str) -> Option<Tag> {
        let b = s.as_bytes();
        let mut i = 1;
        let closing = b.get(i) == Some(&b'/');
        if closing {
            i += 1;
        }
        let special = matches!(b.get(i), Some(b'!') | Some(b'?'));
        if !special && !b.get(i).is_some_and(|c| c.is_ascii_alphabetic()) {
            return None;
        }
        let start = i;
        while b
            .get(i)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'-')
        {
            i += 1;
        }
        let name = if special {
            String::new()
        } else {
            s[start..i].to_ascii_lowercase()
        };
        // To the closing `>`, skipping quoted attribute values.
        let mut quote = None;
        while let Some(&c) = b.get(i) {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, b'"' | b'\'') if !special => quote = Some(c),
                (None, b'>') => break,
                _ => {}
            }
            i += 1;
        }
        let self_closing = i > 0 && b.get(i - 1) == Some(&b'/');
        Some(Tag {
            name,
            closing,
            self_closing,
            len: (i + 1).min(s.len()),
        })
    }
}

/// Offset of `</name` (any case) in `s`, or its length.
fn find_end_tag(s: &str, name: &str) -> usize {
    let mut from = 0;
    while let Some(at) = s[from..].find("</") {
        let start = from + at;
        let candidate = s.as_bytes().get(start + 2..start + 2 + name.len());
        if candidate.is_some_and(|c| c.eq_ignore_ascii_case(name.as_bytes())) {
            return start;
        }
        from = start + 2;
    }
    s.len()
}

/// Decodes character references: the common named ones and numeric ones.
fn decode(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let semi = after.find(';').filter(|&n| n <= 10);
        let decoded = semi.and_then(|n| reference(&after[..n]));
        match (semi, decoded) {
            (Some(n), Some(c)) => {
                out.push(c);
                rest = &after[n + 1..];
            }
            _ => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn reference(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let n = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(n).filter(|c| !c.is_control() || c.is_whitespace());
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "copy" => '©',
        "reg" => '®',
        "hellip" => '…',
        "mdash" => '—',
        "ndash" => '–',
        _ => return None,
    })
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Text with spaces collapsed and at most one empty line between blocks.
#[derive(Default)]
struct Builder {
    out: String,
    space: bool,
    breaks: u8,
}

impl Builder {
    fn push_text(&mut self, s: &str) {
        for c in s.chars() {
            if c.is_whitespace() {
                self.space = true;
            } else if !c.is_control() {
                if !self.out.is_empty() {
                    if self.breaks > 0 {
                        self.out.push('\n');
                    } else if self.space {
                        self.out.push(' ');
                    }
                }
                self.breaks = 0;
                self.space = false;
                self.out.push(c);
            }
        }
    }
    fn line_break(&mut self) {
        self.breaks = self.breaks.saturating_add(1);
    }
    fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_skips_scripts_styles_and_head_but_keeps_the_title() {
        let dom = r#"<html><head><title>Test &amp; site</title><style>h1{color:red}</style></head><body><h1>Welcome</h1><p>Some <b>bold</b> &amp; text.</p><script>if (a < b) document.write("<p>x</p>")</script><p>from script</p></body></html>"#;
        let t = page_text(dom);
        assert_eq!(t.title.as_deref(), Some("Test & site"));
        assert_eq!(t.text, "Welcome\nSome bold & text.\nfrom script");
    }

    #[test]
    fn references_comments_and_odd_markup() {
        let t = page_text(
            "<p>a &lt;b&gt; &#65;&#x42; &bogus; &amp</p><!-- hidden <p>no</p> -->x < y<br/>z",
        );
        assert_eq!(t.text, "a <b> AB &bogus; &amp\nx < y\nz");
        assert_eq!(t.title, None);
    }

    #[test]
    fn attributes_with_angle_brackets_do_not_end_a_tag() {
        let t = page_text(r#"<div title="a > b">inside</div><img alt='<p>'>after"#);
        assert_eq!(t.text, "inside\nafter");
    }

    #[test]
    fn any_input_gives_an_answer() {
        for s in [
            "",
            "<",
            "<<<",
            "</",
            "<!--",
            "<script>",
            "&#xffffffff;",
            "<a href=\"",
            "\u{0}",
        ] {
            let _ = page_text(s);
        }
        assert_eq!(page_text("<p>unterminated").text, "unterminated");
    }
}
