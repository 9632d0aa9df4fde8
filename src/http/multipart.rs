//! `multipart/form-data` (RFC 7578) for the one upload route, `POST /api/skills/import`: the
//! boundary from Content-Type, the parts, and the first file part of a named field. The input
//! is untrusted and may be as large as the HTTP body cap (`http::MAX_BODY`), so every step is
//! bounded: the boundary search is memchr's linear-time `memmem`, each part's header block is
//! parsed by `httparse` (at most [`MAX_PART_HEADERS`] headers within [`MAX_HEADER_BYTES`]),
//! at most [`MAX_PARTS`] parts are looked at, and the result borrows from the body (no copy).
//!
//! Why not a crate for the whole job: the maintained multipart parsers are async (`multer`) or
//! unmaintained (`multipart`); the framing left here is a short loop over two maintained
//! primitives. Pure; runs on the thread that handles the request.

use memchr::memmem;

/// Longest boundary accepted (RFC 2046 allows 70; some clients go longer).
pub(crate) const MAX_BOUNDARY: usize = 200;
/// Parts examined before giving up on finding the file.
pub(crate) const MAX_PARTS: usize = 64;
/// Largest header block of one part, in bytes.
pub(crate) const MAX_HEADER_BYTES: usize = 8 * 1024;
/// Most headers in one part.
pub(crate) const MAX_PART_HEADERS: usize = 16;

/// The `boundary` parameter of a `multipart/form-data` Content-Type.
pub(crate) fn boundary(content_type: &str) -> Option<String> {
    let (mime, params) = content_type.split_once(';')?;
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let b = param(params, "boundary")?;
    (!b.is_empty() && b.len() <= MAX_BOUNDARY).then_some(b)
}

/// The first part named `field` that carries a filename: `(filename, bytes)`. A part without
/// a filename is not a file upload. `None` for anything malformed, truncated or over a bound.
pub(crate) fn file<'a>(content_type: &str, body: &'a [u8], field: &str) -> Option<(String, &'a [u8])> {
    let delim = format!("--{}", boundary(content_type)?);
    let delim = delim.as_bytes();
    let finder = memmem::Finder::new(delim);
    let mut pos = finder.find(body)?;
    for _ in 0..MAX_PARTS {
        let start = pos + delim.len();
        let rest = &body[start..];
        if rest.starts_with(b"--") {
            return None;
        }
        // Transport padding, then the CRLF that ends the delimiter line.
        let pad = rest.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
        let headers_start = start + pad + if rest[pad..].starts_with(b"\r\n") { 2 } else { 0 };
        let block = &body[headers_start..body.len().min(headers_start + MAX_HEADER_BYTES)];
        let mut slots = [httparse::EMPTY_HEADER; MAX_PART_HEADERS];
        let (used, headers) = match httparse::parse_headers(block, &mut slots) {
            Ok(httparse::Status::Complete(done)) => done,
            Ok(httparse::Status::Partial) | Err(_) => return None,
        };
        let content_start = headers_start + used;
        let next = content_start + finder.find(&body[content_start..])?;
        // The content ends before the CRLF that precedes the next delimiter.
        let content_end = if body[content_start..next].ends_with(b"\r\n") { next - 2 } else { next };
        let disposition = headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-disposition"))
            .map(|h| String::from_utf8_lossy(h.value).into_owned());
        if let Some(d) = disposition {
            let params = d.split_once(';').map(|(_, p)| p).unwrap_or("");
            if param(params, "name").as_deref() == Some(field) {
                if let Some(filename) = param(params, "filename") {
                    return Some((filename, &body[content_start..content_end]));
                }
            }
        }
        pos = next;
    }
    None
}

/// `key=value` from `;`-separated parameters; a quoted value may hold `;` and `\`-escapes.
fn param(params: &str, key: &str) -> Option<String> {
    let mut rest = params;
    loop {
        rest = rest.trim_start_matches([';', ' ', '\t']);
        if rest.is_empty() {
            return None;
        }
        let (k, after) = match rest.find(['=', ';']) {
            Some(i) if rest.as_bytes()[i] == b'=' => (rest[..i].trim(), &rest[i + 1..]),
            Some(i) => {
                rest = &rest[i..];
                continue;
            }
            None => return None,
        };
        let after = after.trim_start();
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => {
                let mut v = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, escaped)) = chars.next() {
                                v.push(escaped);
                            }
                        }
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        c => v.push(c),
                    }
                }
                (v, &quoted[end..])
            }
            None => {
                let end = after.find(';').unwrap_or(after.len());
                (after[..end].trim().to_string(), &after[end..])
            }
        };
        if k.eq_ignore_ascii_case(key) {
            return Some(value);
        }
        rest = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::prng::{cases, seed, Prng};

    const CT: &str = "multipart/form-data; boundary=b";

    #[test]
    fn finds_the_file_part() {
        let body =
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.zip\"\r\n\r\nPK\x03\x04\r\n--b--\r\n";
        let (name, data) = file(CT, body, "file").unwrap();
        assert_eq!((name.as_str(), data), ("a.zip", &b"PK\x03\x04"[..]));
        assert!(file("application/json", body, "file").is_none());
        assert!(file(CT, body, "other").is_none());
        assert!(file(CT, b"--b\r\ngarbage", "file").is_none());
        let no_filename = b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--b--";
        assert!(file("multipart/form-data; boundary=\"b\"", no_filename, "file").is_none());
        // A quoted filename may hold the parameter separator and escaped quotes.
        let odd = b"--b\r\ncontent-disposition: form-data; filename=\"a;\\\"b\\\".zip\"; name=file\r\n\r\nx\r\n--b--";
        assert_eq!(file(CT, odd, "file"), Some(("a;\"b\".zip".to_string(), &b"x"[..])));
    }

    #[test]
    fn boundary_and_bounds() {
        assert_eq!(boundary("Multipart/Form-Data; charset=utf-8; BOUNDARY=\"x y\"").as_deref(), Some("x y"));
        assert_eq!(boundary("multipart/form-data; boundary="), None);
        assert_eq!(boundary("multipart/form-data"), None);
        assert_eq!(boundary(&format!("multipart/form-data; boundary={}", "a".repeat(MAX_BOUNDARY + 1))), None);
        assert!(boundary(&format!("multipart/form-data; boundary={}", "a".repeat(MAX_BOUNDARY))).is_some());
        let part = |name: &str| format!("--b\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\nv\r\n");
        let with_file_after = |n: usize| {
            let mut s: String = (0..n).map(|_| part("note")).collect();
            s.push_str(
                "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.zip\"\r\n\r\nZ\r\n--b--\r\n",
            );
            s.into_bytes()
        };
        assert!(file(CT, &with_file_after(MAX_PARTS - 1), "file").is_some());
        assert!(file(CT, &with_file_after(MAX_PARTS), "file").is_none());
        let big_header = format!(
            "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.zip\"\r\nX-Pad: {}\r\n\r\nZ\r\n--b--",
            "p".repeat(MAX_HEADER_BYTES)
        );
        assert!(file(CT, big_header.as_bytes(), "file").is_none());
        let many: String = (0..=MAX_PART_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        let many =
            format!("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n{many}\r\nZ\r\n--b--");
        assert!(file(CT, many.as_bytes(), "file").is_none());
    }

    fn random_part(r: &mut Prng, boundary: &str) -> (String, Option<String>, Vec<u8>) {
        let name = r.pick(&["file", "note", "files", "FILE"]).to_string();
        let filename = r.chance(60).then(|| r.pick(&["a.zip", "s k.ZIP", "x;y.zip", "天气.zip", ""]).to_string());
        let mut content = Vec::new();
        for _ in 0..r.below(8) {
            let near_miss = format!("--{}", &boundary[..boundary.len() - 1]);
            match r.below(5) {
                0 => content.extend_from_slice(b"\r\n"),
                1 => content.extend_from_slice(near_miss.as_bytes()),
                2 => content.extend_from_slice(b"--"),
                // Never a `q`: only the boundary's last char is one, so content cannot hold it.
                _ => {
                    let n = r.below(40);
                    content.extend(r.bytes(n).into_iter().map(|b| if b == b'q' { b'r' } else { b }))
                }
            }
        }
        (name, filename, content)
    }

    fn quote(s: &str) -> String {
        s.replace('\\', "\\\\").replace('"', "\\\"")
    }

    /// Random well-formed bodies (near-miss boundaries, CRLFs and dashes in the content,
    /// preamble and epilogue): the parser returns exactly the first matching file part.
    #[test]
    fn round_trips_random_bodies() {
        let mut r = Prng::new(seed(0x6d75_6c74));
        for case in 0..cases(3000) {
            let boundary: String = (0..1 + r.below(40)).map(|_| *r.pick(&['a', 'Z', '0', '-', '_', '\''])).collect();
            let boundary = format!("{boundary}q");
            let parts: Vec<_> = (0..r.below(6)).map(|_| random_part(&mut r, &boundary)).collect();
            let mut body = Vec::new();
            if r.chance(30) {
                body.extend_from_slice(b"preamble\r\n");
            }
            for (name, filename, content) in &parts {
                let fname = filename.as_ref().map(|f| format!("; filename=\"{}\"", quote(f))).unwrap_or_default();
                body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{fname}\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes());
                body.extend_from_slice(content);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
            if r.chance(30) {
                body.extend_from_slice(b"epilogue");
            }
            let want = parts
                .iter()
                .find(|(n, f, _)| n == "file" && f.is_some())
                .map(|(_, f, c)| (f.clone().unwrap_or_default(), c.as_slice()));
            let ct = format!("multipart/form-data; boundary=\"{boundary}\"");
            assert_eq!(file(&ct, &body, "file"), want, "case {case}");
        }
    }

    /// Mutated and random bodies: no panic, and any answer is a slice of the body.
    #[test]
    fn hostile_bodies_never_panic() {
        let mut r = Prng::new(seed(0x686f_7374));
        let base =
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.zip\"\r\n\r\nPK\r\n--b--\r\n".to_vec();
        for _ in 0..cases(20_000) {
            let n = r.below(200);
            let mut body = if r.chance(20) { r.bytes(n) } else { base.clone() };
            for _ in 0..r.below(4) {
                if body.is_empty() {
                    break;
                }
                let i = r.below(body.len());
                match r.below(4) {
                    0 => body[i] ^= 1 << r.below(8),
                    1 => body.truncate(i),
                    2 => body
                        .splice(i..i, r.pick(&[&b"--b"[..], b"\r\n\r\n", b"\"", b";", b"\r\n--b--"]).iter().copied())
                        .for_each(drop),
                    _ => {
                        body.remove(i);
                    }
                }
            }
            let ct = *r.pick(&[
                CT,
                "multipart/form-data; boundary=\"b",
                "multipart/form-data; boundary=b;",
                "text/plain; boundary=b",
            ]);
            if let Some((_, data)) = file(ct, &body, "file") {
                let range = body.as_ptr_range();
                assert!(data.is_empty() || range.contains(&data.as_ptr()));
                assert!(data.len() <= body.len());
            }
        }
    }
}
