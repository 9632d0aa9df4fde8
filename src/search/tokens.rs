//! The search tokeniser (docs/search.md §2): one pass over text, no model, no dictionary.
//! Letters and digits outside CJK scripts form words, lowercased, common English stop words
//! dropped and a light suffix stemmer applied; a run of CJK characters (Han, kana, Hangul)
//! gives every character and every pair of neighbours, so a query of any length matches
//! without word segmentation. Each token keeps its byte span, for snippets and phrases. Pure;
//! any thread calls it.

/// Words longer than this many bytes are cut (a base64 blob stays one token, not a huge key).
const MAX_WORD_BYTES: usize = 48;

/// One token: its key and where it came from in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) key: String,
    /// Byte span in the text.
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Word position (a CJK character counts one position; its pair shares the first's).
    pub(crate) pos: u32,
    /// A CJK pair (queries of two or more CJK characters use only pairs).
    pub(crate) pair: bool,
}

/// Chinese, Japanese and Korean characters: a run of them is split into characters and pairs.
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0x1100..=0x11FF    // Hangul Jamo
        | 0x3130..=0x318F    // Hangul compatibility Jamo
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x2FA1F  // Extensions B-F, compatibility supplement
        | 0x31F0..=0x31FF    // Katakana phonetic extensions
        | 0xFF66..=0xFF9D) // half-width Katakana
}

/// English words too common to rank anything (dropped from documents and queries alike).
const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "did", "do", "does", "for", "from", "had", "has",
    "have", "he", "her", "his", "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she",
    "so", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "was", "we", "were", "what",
    "when", "where", "which", "who", "why", "how", "will", "with", "you", "your", "would", "could", "can", "am", "s",
    "t", "about", "just", "too", "very", "yeah", "oh", "hey", "wow",
];

fn is_stop(w: &str) -> bool {
    STOP.contains(&w)
}

/// A light English stemmer: plural and common verb endings, so "painting", "paints" and
/// "painted" meet at "paint". Words of other languages pass through (they rarely end so).
pub(crate) fn stem(w: &str) -> String {
    let b = w.as_bytes();
    if !b.iter().all(u8::is_ascii_lowercase) || b.len() <= 3 {
        return w.to_string();
    }
    let mut s = w.to_string();
    if s.ends_with("ies") && s.len() > 4 {
        s.truncate(s.len() - 3);
        s.push('y');
    } else if s.ends_with("sses") {
        s.truncate(s.len() - 2);
    } else if s.ends_with('s') && !s.ends_with("ss") && !s.ends_with("us") && !s.ends_with("is") {
        s.pop();
    }
    for suffix in ["ing", "ed"] {
        if s.ends_with(suffix) && s.len() >= suffix.len() + 3 {
            let stem = &s[..s.len() - suffix.len()];
            if stem.bytes().any(|c| b"aeiouy".contains(&c)) {
                s.truncate(stem.len());
                let n = s.len();
                let bytes = s.as_bytes();
                if n >= 2 && bytes[n - 1] == bytes[n - 2] && !b"lsz".contains(&bytes[n - 1]) {
                    s.pop();
                }
                break;
            }
        }
    }
    if s.len() > 3 && s.ends_with('e') {
        s.pop();
    }
    if s.len() > 3 && s.ends_with('y') {
        s.pop();
        s.push('i');
    }
    s
}

#[derive(PartialEq, Clone, Copy)]
enum Class {
    Word,
    Cjk,
    Other,
}

fn class(c: char) -> Class {
    if is_cjk(c) {
        Class::Cjk
    } else if c.is_alphanumeric() {
        Class::Word
    } else {
        Class::Other
    }
}

/// Every token of `text`, in order.
pub(crate) fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut pos = 0u32;
    let mut iter = text.char_indices().peekable();
    while let Some(&(start, c)) = iter.peek() {
        match class(c) {
            Class::Other => {
                iter.next();
            }
            Class::Word => {
                let mut end = start;
                while let Some(&(i, c)) = iter.peek() {
                    if class(c) != Class::Word {
                        break;
                    }
                    end = i + c.len_utf8();
                    iter.next();
                }
                let lower = text[start..end].to_lowercase();
                let mut cut = lower.len().min(MAX_WORD_BYTES);
                while !lower.is_char_boundary(cut) {
                    cut -= 1;
                }
                let word = &lower[..cut];
                if !is_stop(word) {
                    out.push(Token { key: stem(word), start, end, pos, pair: false });
                }
                pos += 1;
            }
            Class::Cjk => {
                let mut prev: Option<(usize, char)> = None;
                while let Some(&(i, c)) = iter.peek() {
                    if class(c) != Class::Cjk {
                        break;
                    }
                    iter.next();
                    if let Some((pi, pc)) = prev {
                        out.push(Token {
                            key: format!("{pc}{c}"),
                            start: pi,
                            end: i + c.len_utf8(),
                            pos: pos - 1,
                            pair: true,
                        });
                    }
                    out.push(Token { key: c.to_string(), start: i, end: i + c.len_utf8(), pos, pair: false });
                    pos += 1;
                    prev = Some((i, c));
                }
            }
        }
    }
    out
}

/// The tokens a query looks up: words as in documents; a CJK run of one character as that
/// character, a longer run as its pairs only (every pair in the text also has its characters).
pub(crate) fn query_tokens(text: &str) -> Vec<Token> {
    let all = tokens(text);
    let mut out = Vec::with_capacity(all.len());
    for (i, t) in all.iter().enumerate() {
        let is_cjk_char = !t.pair && t.key.chars().next().is_some_and(is_cjk);
        if is_cjk_char {
            // A lone character: no pair starts or ends on it.
            let paired = all.get(i + 1).is_some_and(|n| n.pair && n.start == t.start)
                || (i > 0 && all[i - 1].pair && all[i - 1].end == t.end);
            if paired {
                continue;
            }
        }
        out.push(t.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Vec<String> {
        tokens(text).into_iter().map(|t| t.key).collect()
    }

    fn qkeys(text: &str) -> Vec<String> {
        query_tokens(text).into_iter().map(|t| t.key).collect()
    }

    #[test]
    fn english_words_are_lowercased_stemmed_and_stop_words_dropped() {
        assert_eq!(keys("The Painting of sunrises"), ["paint", "sunris"]);
        assert_eq!(keys("paints painted painting paint"), ["paint", "paint", "paint", "paint"]);
        assert_eq!(keys("running runs"), ["run", "run"]);
        assert_eq!(keys("libraries library"), ["librari", "librari"]);
        assert_eq!(keys("class glass"), ["class", "glass"]);
        assert_eq!(keys("v2.0 API_KEY x86-64"), ["v2", "0", "api", "key", "x86", "64"]);
        assert_eq!(keys("Größe ÉCOLE"), ["größe", "école"]);
        let long = "a".repeat(200);
        assert_eq!(keys(&long)[0].len(), MAX_WORD_BYTES);
    }

    #[test]
    fn cjk_runs_give_characters_and_pairs_with_spans() {
        let t = tokens("我爱北京 ok");
        let k: Vec<&str> = t.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(k, ["我", "我爱", "爱", "爱北", "北", "北京", "京", "ok"]);
        let bj = t.iter().find(|t| t.key == "北京").unwrap();
        assert_eq!(&"我爱北京 ok"[bj.start..bj.end], "北京");
        assert!(bj.pair);
        // A query of two or more characters looks up pairs; one character looks up itself.
        assert_eq!(qkeys("北京天气"), ["北京", "京天", "天气"]);
        assert_eq!(qkeys("京 tea"), ["京", "tea"]);
        // Japanese and Korean too, next to Latin words without spaces.
        assert_eq!(qkeys("東京タワーに行く"), ["東京", "京タ", "タワ", "ワー", "ーに", "に行", "行く"]);
        assert_eq!(qkeys("한국어abc"), ["한국", "국어", "abc"]);
    }

    #[test]
    fn positions_count_words_and_characters() {
        let t = tokens("a red 苹果 box");
        let pos: Vec<(String, u32)> = t.into_iter().map(|t| (t.key, t.pos)).collect();
        assert_eq!(pos, [("red".into(), 1), ("苹".into(), 2), ("苹果".into(), 2), ("果".into(), 3), ("box".into(), 4)]);
    }
}
