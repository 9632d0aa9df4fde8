//! Secrets the server holds and must not hand out: which environment variables are secret
//! ([`is_secret_name`]), taking them out of the process environment at start-up
//! ([`take_from_environment`], [`hand_over`]) so that no tool can read them back, not even
//! from `/proc/<server pid>/environ`, and the live registry of known secret values that every
//! tool result is redacted against ([`Secrets`]), which keeps them only as keyed fingerprints.
//!
//! The start-up parts run on the main thread before any other thread exists. The registry is
//! shared: turn workers and the logger redact with it, the HTTP thread updates it when the LLM
//! settings or the MCP catalog change.
//!
//! How the environment is cleaned. `/proc/<pid>/environ` shows the memory that held the
//! environment block when the current image was executed; `unsetenv` only drops the pointer
//! to an entry, so the text stays readable there. Two measures cover that:
//! - the allocator re-exec (`util::malloc`) runs the new image with an envp that has no
//!   secrets and hands them over in a sealed memfd whose number travels in [`FD_VAR`]; the new
//!   image reads and closes it first thing ([`take_from_environment`]);
//! - any secret entry still in this image's block (the re-exec was skipped: not glibc, exec
//!   failed, or the caller set the marker that disables it; or the memfd could not be made and
//!   the secrets rode in the envp) is removed with `unsetenv` and then overwritten with NULs
//!   in place, within the range the kernel reports as the block (`/proc/self/stat` fields
//!   `env_start`/`env_end`). This is how `setproctitle` rewrites `/proc/<pid>/cmdline`.
//!
//! Limits: the process that started the server, and the first image until it re-executes
//! (microseconds, before any thread), had the secrets in their environment; where `/proc` is
//! not mounted the block cannot be located, so only `unsetenv` applies (nothing can read
//! `/proc/<pid>/environ` there either).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use crate::util::sync;

/// The variable that carries the memfd number from the first image to the re-executed one.
pub(crate) const FD_VAR: &str = "CASHCODE_SECRETS_FD";
/// Known secret values shorter than this (in bytes) are not redacted: a short value such as
/// `abc` occurs in ordinary output and replacing it would mangle results while protecting
/// little. Tokens under 16 characters already get a start-up warning.
pub(crate) const MIN_SECRET_LEN: usize = 6;
/// What a redacted value is replaced with (the same marker as `util::redact`).
pub(crate) const REDACTED: &str = "[REDACTED]";
/// Largest hand-over accepted (the whole set of secret variables).
const MAX_HANDOVER_BYTES: u64 = 1 << 20;
const MEMFD_NAME: &std::ffi::CStr = c"cashcode-secrets";

/// Whether an environment variable holds a secret, by its name, any case:
/// - it contains `KEY`, `TOKEN`, `SECRET`, `PASSWORD`, `PASSWD` or `CREDENTIAL` anywhere
///   (`CASHCODE_TOKEN`, `DEEPSEEK_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `X_CREDENTIALS`, …);
/// - or one of its `_`-separated words is `PASS`, `PAT`, `AUTH` or `CREDS` (`DB_PASS`,
///   `GITHUB_PAT`, `NPM_AUTH`, `AWS_CREDS`, `MY_AUTH_HEADER`). These short markers are matched
///   as whole words only, so ordinary names that merely contain them stay visible: `PATH`,
///   `PATTERN`, `PASSAGE`, `COMPASS`, `AUTHOR`, and `XAUTHORITY` (the X11 cookie's file
///   *path*, which X clients run by `exec` need; the cookie itself is not in the variable).
///
/// Such variables are taken out of the server's environment at start-up, never reach `exec`
/// commands, and their values are redacted from tool results. A variable with another name
/// whose value carries URL credentials counts too ([`is_secret_var`]).
pub(crate) fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"].iter().any(|m| n.contains(m))
        || n.split('_').any(|w| ["PASS", "PAT", "AUTH", "CREDS"].contains(&w))
}

/// Whether the variable `name=value` is secret: a secret name ([`is_secret_name`]) or a value
/// holding a URL with a password (`postgres://app:hunter22@db/app`, whatever the name, e.g.
/// `DATABASE_URL`). The whole value is then the secret: it is taken out of the environment
/// and redacted whole, and its password alone is redacted too ([`url_passwords`]).
///
/// Proxy variables (`HTTP_PROXY`, `https_proxy`, `ALL_PROXY`, … any name ending in `_PROXY`)
/// stay in the environment even with a password: the LLM client and `exec` commands read
/// them there, and taking them out would silently bypass the proxy. Their values are still
/// registered for redaction (`config::known_secrets`).
pub(crate) fn is_secret_var(name: &str, value: &str) -> bool {
    is_secret_name(name) || (!name.to_ascii_uppercase().ends_with("_PROXY") && url_passwords(value).next().is_some())
}

/// The non-empty passwords of the URLs in `text` (`scheme://user:password@host…`). A user name
/// alone (`ssh://git@host`) is not a credential here: it is the common, public case.
pub(crate) fn url_passwords(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices("://").filter_map(move |(i, _)| {
        let rest = &text[i + 3..];
        let authority = &rest[..rest.find(['/', '?', '#', ' ', '\t', '\n', '"', '\'']).unwrap_or(rest.len())];
        let userinfo = &authority[..authority.rfind('@')?];
        let (_, password) = userinfo.split_once(':')?;
        (!password.is_empty()).then_some(password)
    })
}

/// Takes every secret variable out of the process environment and returns them (UTF-8 ones;
/// others are removed and dropped), together with those the previous image handed over in a
/// memfd. Call first thing in `main`, before any thread starts: it changes the environment.
pub fn take_from_environment() -> Vec<(String, String)> {
    let mut taken = receive();
    let names: Vec<std::ffi::OsString> = std::env::vars_os()
        .filter(|(k, v)| is_secret_var(&k.to_string_lossy(), &v.to_string_lossy()))
        .map(|(k, _)| k)
        .collect();
    for name in names {
        if let (Ok(k), Some(Ok(v))) = (name.clone().into_string(), std::env::var_os(&name).map(|v| v.into_string())) {
            taken.push((k, v));
        }
        std::env::remove_var(&name);
    }
    wipe_initial_block();
    taken
}

/// Prepares `cmd` (the re-exec of this binary) to receive `secrets` without putting them in
/// its environment: they go into a sealed memfd left open across `exec`, its number in
/// [`FD_VAR`]. The returned descriptor must live until `exec`; if `exec` fails, dropping it
/// closes the memfd. Without a memfd the secrets ride in `cmd`'s environment, and the new
/// image wipes them from its block in [`take_from_environment`].
pub fn hand_over(cmd: &mut std::process::Command, secrets: &[(String, String)]) -> Option<std::os::fd::OwnedFd> {
    if secrets.is_empty() {
        return None;
    }
    match write_memfd(secrets) {
        Some(fd) => {
            use std::os::fd::AsRawFd;
            cmd.env(FD_VAR, fd.as_raw_fd().to_string());
            Some(fd)
        }
        None => {
            cmd.envs(secrets.iter().map(|(k, v)| (k, v)));
            None
        }
    }
}

#[cfg(target_os = "linux")]
fn write_memfd(secrets: &[(String, String)]) -> Option<std::os::fd::OwnedFd> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    use std::io::Write;
    let mut bytes = Vec::new();
    for (k, v) in secrets {
        bytes.extend_from_slice(k.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(v.as_bytes());
        bytes.push(0);
    }
    // No MFD_CLOEXEC: the descriptor must survive the exec; the new image closes it before
    // starting any thread or child.
    let fd = memfd_create(MEMFD_NAME, MFdFlags::MFD_ALLOW_SEALING).ok()?;
    let mut file = std::fs::File::from(fd);
    let written = file.write_all(&bytes);
    zeroize::Zeroize::zeroize(&mut bytes);
    written.ok()?;
    // Sealed, so the receiver can tell our memfd from any other descriptor a caller might
    // name in the variable (only a sealed memfd answers F_GET_SEALS with these seals).
    fcntl(&file, FcntlArg::F_ADD_SEALS(SealFlag::from_bits_retain(SEALS))).ok()?;
    Some(file.into())
}

#[cfg(not(target_os = "linux"))]
fn write_memfd(_: &[(String, String)]) -> Option<std::os::fd::OwnedFd> {
    None
}

#[cfg(target_os = "linux")]
const SEALS: libc::c_int = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;

/// The secrets the previous image handed over, if [`FD_VAR`] names our sealed memfd. The
/// variable is removed either way.
#[cfg(target_os = "linux")]
fn receive() -> Vec<(String, String)> {
    let Some(raw) = std::env::var_os(FD_VAR) else {
        return Vec::new();
    };
    std::env::remove_var(FD_VAR);
    raw.to_str().and_then(|s| s.parse::<libc::c_int>().ok()).and_then(read_handover).unwrap_or_default()
}

/// Reads and closes descriptor `fd` if it is a memfd sealed by [`write_memfd`]; any other
/// descriptor (a caller may put any number in the variable) is left alone.
#[cfg(target_os = "linux")]
fn read_handover(fd: libc::c_int) -> Option<Vec<(String, String)>> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::FileExt;
    // SAFETY: fcntl only queries the descriptor; a number that is not open fails with EBADF.
    // Raw on purpose: a safe wrapper needs a `BorrowedFd`, whose contract (the number is open)
    // is exactly what this call finds out.
    if fd <= 2 || unsafe { libc::fcntl(fd, libc::F_GET_SEALS) } != SEALS {
        return None;
    }
    // SAFETY: the descriptor is open, is the sealed memfd the previous image left for us, and
    // nothing else in this image refers to it; the File closes it on drop. (Taking ownership of
    // an inherited descriptor number is unsafe in any wrapper.)
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let len = file.metadata().ok()?.len().min(MAX_HANDOVER_BYTES);
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0).ok()?;
    drop(file);
    let out = parse_handover(&bytes);
    zeroize::Zeroize::zeroize(&mut bytes);
    Some(out)
}

/// The `name\0value\0` pairs of a hand-over.
#[cfg(target_os = "linux")]
fn parse_handover(bytes: &[u8]) -> Vec<(String, String)> {
    let mut fields = bytes.split(|b| *b == 0);
    let mut out = Vec::new();
    while let (Some(k), Some(v)) = (fields.next(), fields.next()) {
        if let (Ok(k), Ok(v)) = (std::str::from_utf8(k), std::str::from_utf8(v)) {
            if !k.is_empty() {
                out.push((k.to_string(), v.to_string()));
            }
        }
    }
    out
}

#[cfg(not(target_os = "linux"))]
fn receive() -> Vec<(String, String)> {
    std::env::remove_var(FD_VAR);
    Vec::new()
}

/// Overwrites, with NULs, every entry of this image's initial environment block whose name is
/// secret (see the module header). Only bytes inside the block the kernel reports are touched.
#[cfg(target_os = "linux")]
fn wipe_initial_block() {
    let Some((start, end)) = environ_block() else { return };
    if start == 0 || end <= start || end - start > 64 << 20 {
        return;
    }
    let base = start as *mut u8;
    let len = end - start;
    let mut entry = 0;
    while entry < len {
        // SAFETY: [start, end) is this process's environment block, mapped read-write on the
        // initial stack for the life of the process; every offset read or written is < len.
        // No Rust value owns these bytes, no other thread exists yet, and the secret entries
        // were unset above, so nothing points at the bytes that are overwritten.
        unsafe {
            let mut stop = entry;
            while stop < len && base.add(stop).read() != 0 {
                stop += 1;
            }
            let text = std::slice::from_raw_parts(base.add(entry), stop - entry);
            let name = text.split(|b| *b == b'=').next().unwrap_or_default();
            if is_secret_name(&String::from_utf8_lossy(name)) {
                for i in entry..stop {
                    base.add(i).write_volatile(0);
                }
            }
            entry = stop + 1;
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn wipe_initial_block() {}

/// `env_start` and `env_end` (fields 50 and 51 of `/proc/self/stat`, Linux 3.5+).
#[cfg(target_os = "linux")]
fn environ_block() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may itself hold spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3.
    let start = fields.get(50 - 3)?.parse().ok()?;
    let end = fields.get(51 - 3)?.parse().ok()?;
    Some((start, end))
}

/// The live set of secret values known to the server, by source (`config`: the token and the
/// secret variables; `llm`: the stored API key; `mcp`: configured header values and secret
/// `env` values). Cheap to clone; all clones share one set.
///
/// It holds no value in clear, only keyed fingerprints of each form a value may be printed in
/// ([`Form`]): most of these values (`OPENAI_API_KEY`, `GITHUB_TOKEN`, … from the server's
/// environment) are kept only to be redacted, and the ones the server uses (the LLM key, the
/// access token, MCP headers) are held by their owners, not here. [`Secrets::set`] wipes the
/// strings it is given once they are fingerprinted.
#[derive(Clone, Default)]
pub struct Secrets {
    inner: Arc<RwLock<Known>>,
}

#[derive(Default)]
struct Known {
    by_source: BTreeMap<&'static str, Vec<ValuePrint>>,
    /// How many distinct values (by [`ValuePrint::id`]) the sources hold.
    count: usize,
    /// What [`Secrets::redact`] runs: one scanner per anchor width ([`ANCHOR`], or a shorter
    /// form's own length), each looking for every form of every value.
    scanners: Vec<Scanner>,
}

/// One value's fingerprints: an identity (to count distinct values) and its forms.
struct ValuePrint {
    id: [u8; 32],
    forms: Vec<FormPrint>,
}

/// Windows of this many bytes are what a scan hashes first: a form is looked at only where the
/// hash of the window at its start falls in the bucket of the hash of its first `ANCHOR`
/// bytes. One pass serves every form of every length; forms shorter than this anchor on their
/// whole length.
const ANCHOR: usize = 8;

/// A form as kept: its length, the bucket of its anchor (the top 16 bits of the rolling hash
/// of its first [`ANCHOR`] bytes: too few bits to tell those bytes), and its fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FormPrint {
    anchor: u16,
    len: usize,
    print: Print,
}

/// How a text window is compared with a form before its digest is taken: exactly (the value
/// without whitespace), as base64 in either alphabet (`-`/`_` read as `+`/`/`), or as hex in
/// any letter case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Form {
    Exact = 0,
    Base64 = 1,
    Hex = 2,
}

impl Form {
    fn canon(self, b: u8) -> u8 {
        match (self, b) {
            (Form::Base64, b'-') => b'+',
            (Form::Base64, b'_') => b'/',
            (Form::Hex, b) => b.to_ascii_lowercase(),
            (_, b) => b,
        }
    }
}

/// A form's fingerprint: the keyed rolling hash of its folded bytes ([`fold`]), compared
/// first, and the keyed SHA-256 of its bytes as read by its [`Form`], which confirms a match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Print {
    roll: u64,
    form: Form,
    digest: [u8; 32],
}

/// The forms anchored on windows of `q` bytes, and what scanning for them needs.
struct Scanner {
    q: usize,
    /// `weight[b] * base^(q-1)`: what the byte leaving the window takes from the hash.
    out: Box<[u64; 256]>,
    /// Bit `anchor` set for every form: most windows are rejected by one load.
    filter: Box<[u64; 1024]>,
    /// Sorted by anchor.
    forms: Vec<FormPrint>,
}

/// The per-process key of the fingerprints, drawn from the OS on first use.
struct Key {
    /// SHA-256 after absorbing 32 random bytes: the confirming digest.
    keyed: sha2::Sha256,
    /// Odd multiplier of the rolling hash (modulo 2^64).
    base: u64,
    /// A random weight per byte, equal for bytes that [`fold`] makes equal.
    weight: [u64; 256],
}

fn key() -> &'static Key {
    static KEY: std::sync::OnceLock<Key> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        use sha2::Digest;
        let mut seed = [0u8; 32 + 8 + 256 * 8];
        crate::util::rand::fill(&mut seed);
        let word = |i: usize| u64::from_le_bytes(seed[32 + i * 8..40 + i * 8].try_into().unwrap_or_default());
        let mut weight = [0u64; 256];
        for (b, w) in weight.iter_mut().enumerate() {
            *w = word(1 + fold(b as u8) as usize);
        }
        let key = Key { keyed: sha2::Sha256::new_with_prefix(&seed[..32]), base: word(0) | 1, weight };
        zeroize::Zeroize::zeroize(&mut seed[..]);
        key
    })
}

/// The byte the rolling hash sees: ASCII lower case, and the URL-safe base64 letters as the
/// standard ones, so one hash serves every [`Form`] (each form's reading folds to this).
fn fold(b: u8) -> u8 {
    match b {
        b'-' => b'+',
        b'_' => b'/',
        b => b.to_ascii_lowercase(),
    }
}

fn roll(bytes: &[u8]) -> u64 {
    let k = key();
    bytes.iter().fold(0u64, |h, &b| h.wrapping_mul(k.base).wrapping_add(k.weight[b as usize]))
}

/// The keyed SHA-256 of `bytes` as `form` reads them.
fn digest(form: Form, bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    let mut h = key().keyed.clone();
    h.update([form as u8]);
    let mut buf = [0u8; 64];
    for chunk in bytes.chunks(buf.len()) {
        for (d, s) in buf.iter_mut().zip(chunk) {
            *d = form.canon(*s);
        }
        h.update(&buf[..chunk.len()]);
    }
    zeroize::Zeroize::zeroize(&mut buf);
    h.finalize().into()
}

/// The keyed SHA-256 of `bytes` whole, as the access token is kept (`security::AccessPolicy`):
/// equal inputs give equal digests within this process, and nothing in memory leads back to
/// the value (the key is random per process). Its own domain byte keeps it apart from the
/// fingerprints' digests.
pub(crate) fn keyed_digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    let mut h = key().keyed.clone();
    h.update([0xff]);
    h.update(bytes);
    h.finalize().into()
}

/// The fingerprints of `value` (trimmed, at least [`MIN_SECRET_LEN`] bytes): the value
/// without its whitespace, its base64 forms ([`encoded_forms`]) and its hex. The clear forms
/// are wiped before returning.
fn fingerprint(value: &str) -> ValuePrint {
    use zeroize::Zeroize;
    let mut forms: Vec<(Form, String)> = vec![(Form::Exact, without_whitespace(value))];
    forms.extend(encoded_forms(value).into_iter().map(|f| (Form::Base64, f)));
    forms.push((Form::Hex, crate::util::rand::to_hex(value.as_bytes())));
    let mut prints: Vec<FormPrint> = forms
        .iter()
        .filter(|(_, f)| !f.is_empty())
        .map(|(form, f)| {
            let b = f.as_bytes();
            FormPrint {
                anchor: (roll(&b[..b.len().min(ANCHOR)]) >> 48) as u16,
                len: b.len(),
                print: Print { roll: roll(b), form: *form, digest: digest(*form, b) },
            }
        })
        .collect();
    for (_, f) in &mut forms {
        f.zeroize();
    }
    prints.sort_unstable();
    prints.dedup();
    ValuePrint { id: digest(Form::Exact, value.as_bytes()), forms: prints }
}

impl Known {
    fn rebuild(&mut self) {
        let mut ids: Vec<[u8; 32]> = self.by_source.values().flatten().map(|v| v.id).collect();
        ids.sort_unstable();
        ids.dedup();
        self.count = ids.len();
        let mut all: Vec<FormPrint> = self.by_source.values().flatten().flat_map(|v| v.forms.iter().copied()).collect();
        all.sort_unstable_by_key(|f| (f.len.min(ANCHOR), f.anchor, f.len, f.print));
        all.dedup();
        let k = key();
        self.scanners = all
            .chunk_by(|a, b| a.len.min(ANCHOR) == b.len.min(ANCHOR))
            .map(|group| {
                let q = group[0].len.min(ANCHOR);
                let top = (1..q).fold(1u64, |p, _| p.wrapping_mul(k.base));
                let mut out = Box::new([0u64; 256]);
                for (o, w) in out.iter_mut().zip(k.weight) {
                    *o = w.wrapping_mul(top);
                }
                let mut filter = Box::new([0u64; 1024]);
                for f in group {
                    filter[f.anchor as usize >> 6] |= 1 << (f.anchor & 63);
                }
                Scanner { q, out, filter, forms: group.to_vec() }
            })
            .collect();
    }
}

impl Scanner {
    /// Adds to `hits` the spans of `hay` that are one of the forms.
    fn scan(&self, hay: &[u8], hits: &mut Vec<(usize, usize)>) {
        let q = self.q;
        if q == 0 || q > hay.len() {
            return;
        }
        let k = key();
        let mut h = roll(&hay[..q]);
        let mut i = 0;
        loop {
            let anchor = (h >> 48) as u16;
            if self.filter[anchor as usize >> 6] & (1 << (anchor & 63)) != 0 {
                self.confirm(anchor, hay, i, hits);
            }
            if i + q == hay.len() {
                break;
            }
            h = h
                .wrapping_sub(self.out[hay[i] as usize])
                .wrapping_mul(k.base)
                .wrapping_add(k.weight[hay[i + q] as usize]);
            i += 1;
        }
    }

    /// Adds the forms anchored at `anchor` that the text at `at` is: the rolling hash of the
    /// span first, then its keyed digest.
    fn confirm(&self, anchor: u16, hay: &[u8], at: usize, hits: &mut Vec<(usize, usize)>) {
        let from = self.forms.partition_point(|f| f.anchor < anchor);
        for f in self.forms[from..].iter().take_while(|f| f.anchor == anchor) {
            let Some(span) = hay.get(at..at + f.len) else { continue };
            if roll(span) == f.print.roll && digest(f.print.form, span) == f.print.digest {
                hits.push((at, at + f.len));
            }
        }
    }
}

/// Shortest encoded form looked for: the inner base64 runs of a short value are a few
/// characters and would match ordinary text.
const MIN_FORM_LEN: usize = 8;

/// The encodings of `value` a command may print it in: standard base64 with and without
/// padding, URL-safe base64 (both); and, since base64 of a value
/// inside a longer stream depends on where it starts, for each start offset 0, 1, 2 (mod 3)
/// the run of base64 characters that depend on the value alone (in both alphabets). Forms
/// under [`MIN_FORM_LEN`] characters are left out.
fn encoded_forms(value: &str) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    use base64::Engine as _;
    use zeroize::Zeroize;
    let bytes = value.as_bytes();
    let mut forms = vec![
        STANDARD.encode(bytes),
        STANDARD_NO_PAD.encode(bytes),
        URL_SAFE.encode(bytes),
        URL_SAFE_NO_PAD.encode(bytes),
    ];
    for shift in 0..3usize {
        let mut shifted = vec![0u8; shift];
        shifted.extend_from_slice(bytes);
        let mut encoded = STANDARD_NO_PAD.encode(&shifted);
        // Characters before `start` hold bits of the bytes before the value; from `end` on,
        // bits of the bytes after it.
        let (start, end) = ((shift * 8).div_ceil(6), (shifted.len() * 8) / 6);
        if let Some(inner) = encoded.get(start..end) {
            forms.push(inner.replace('+', "-").replace('/', "_"));
            forms.push(inner.to_string());
        }
        shifted.zeroize();
        encoded.zeroize();
    }
    for f in &mut forms {
        if f.len() < MIN_FORM_LEN || f == value {
            f.zeroize();
        }
    }
    forms.retain(|f| !f.is_empty());
    forms
}

/// What [`Secrets::redact`] ignores between a secret's characters: ASCII whitespace, the
/// vertical tab included (which `char::is_ascii_whitespace` leaves out).
fn is_gap(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// `value` without the bytes [`Secrets::redact`] ignores.
fn without_whitespace(value: &str) -> String {
    value.chars().filter(|c| !c.is_ascii() || !is_gap(*c as u8)).collect()
}

impl Secrets {
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// Replaces the values known from `source`. Each value is trimmed; one under
    /// [`MIN_SECRET_LEN`] bytes is not kept. Only fingerprints are kept; the given strings are
    /// wiped.
    pub fn set(&self, source: &'static str, values: impl IntoIterator<Item = String>) {
        let prints: Vec<ValuePrint> = values
            .into_iter()
            .filter_map(|mut v| {
                let t = v.trim();
                let print = (t.len() >= MIN_SECRET_LEN).then(|| fingerprint(t));
                zeroize::Zeroize::zeroize(&mut v);
                print
            })
            .collect();
        let mut k = sync::write(&self.inner);
        k.by_source.insert(source, prints);
        k.rebuild();
    }

    /// `text` with every known secret value, and its base64 and hex forms ([`encoded_forms`]),
    /// replaced by [`REDACTED`]; borrowed when none occurs.
    ///
    /// Matching ignores ASCII whitespace (line breaks, spaces, tabs, CR, vertical tabs, form
    /// feeds): a value cut by `fold`, spread out with spaces or tabs, or split between a
    /// command's stdout and stderr (`exec` redacts their join, see `agent::tools::exec`), is
    /// still found, and the whole span, whitespace inside it included, is replaced. Base64
    /// forms match in either alphabet, hex forms in any letter case. Overlapping matches are
    /// replaced as one span. Cost: one copy of the text without whitespace, then one pass of a
    /// keyed rolling hash over windows of [`ANCHOR`] bytes (another for each length of a form
    /// shorter than that), each window checked against a bit filter; where it passes, the
    /// candidate forms' rolling hashes and then their keyed SHA-256 are compared.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let k = sync::read(&self.inner);
        if k.scanners.is_empty() {
            return Cow::Borrowed(text);
        }
        // `flat` is `text` without ASCII whitespace (still UTF-8: only ASCII bytes go);
        // `breaks[i]` is the index in `flat` before which the i-th removed byte stood.
        let mut breaks = Vec::new();
        let flat: Cow<str> = if text.bytes().any(is_gap) {
            // Copied in runs between gaps (gaps are ASCII, so every run is whole UTF-8).
            let mut f = String::with_capacity(text.len());
            let mut run = 0;
            for (i, b) in text.bytes().enumerate() {
                if is_gap(b) {
                    f.push_str(&text[run..i]);
                    breaks.push(f.len());
                    run = i + 1;
                }
            }
            f.push_str(&text[run..]);
            Cow::Owned(f)
        } else {
            Cow::Borrowed(text)
        };
        let mut hits: Vec<(usize, usize)> = Vec::new();
        for sc in &k.scanners {
            sc.scan(flat.as_bytes(), &mut hits);
        }
        if hits.is_empty() {
            return Cow::Borrowed(text);
        }
        hits.sort_unstable();
        let original = |f: usize| f + breaks.partition_point(|&b| b <= f);
        let mut out = String::with_capacity(text.len());
        let mut done = 0;
        let mut i = 0;
        while i < hits.len() {
            let (start, mut end) = hits[i];
            i += 1;
            while i < hits.len() && hits[i].0 < end {
                end = end.max(hits[i].1);
                i += 1;
            }
            let (s, e) = (original(start), original(end - 1) + 1);
            out.push_str(&text[done..s]);
            out.push_str(REDACTED);
            done = e;
        }
        out.push_str(&text[done..]);
        Cow::Owned(out)
    }

    /// How many values are known (for tests and start-up logging; never the values).
    pub(crate) fn len(&self) -> usize {
        sync::read(&self.inner).count
    }
}

#[cfg(test)]
impl Secrets {
    /// Every byte the registry holds (ids, lengths, anchors, hashes, digests, scan tables), for
    /// the test that no clear value is among them.
    fn held_bytes(&self) -> Vec<u8> {
        let k = sync::read(&self.inner);
        let mut out = Vec::new();
        let form = |f: &FormPrint, out: &mut Vec<u8>| {
            out.extend(f.anchor.to_le_bytes());
            out.extend(f.len.to_le_bytes());
            out.extend(f.print.roll.to_le_bytes());
            out.push(f.print.form as u8);
            out.extend(f.print.digest);
        };
        for v in k.by_source.values().flatten() {
            out.extend(v.id);
            v.forms.iter().for_each(|f| form(f, &mut out));
        }
        for sc in &k.scanners {
            out.extend(sc.q.to_le_bytes());
            sc.out.iter().chain(sc.filter.iter()).for_each(|w| out.extend(w.to_le_bytes()));
            sc.forms.iter().for_each(|f| form(f, &mut out));
        }
        out
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({REDACTED}, {} values)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names() {
        for name in
            ["CASHCODE_TOKEN", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "cashcode_token", "DB_PASSWD", "X_CREDENTIALS"]
        {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "CASHCODE_HOME", "DEEPSEEK_API_BASE", "LANG"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn wider_secret_names_by_word() {
        let secret = [
            "DB_PASS",
            "db_pass",
            "PASS",
            "GITHUB_PAT",
            "GH_PAT_2",
            "NPM_AUTH",
            "MY_AUTH_HEADER",
            "AUTH",
            "AWS_CREDS",
            "GCP_CREDS_JSON",
            "SMTP_PASS_WORD",
            "API_KEY",
            "SESSION_TOKEN",
            "X_CREDENTIALS",
            "MYSQL_PASSWORD",
        ];
        for name in secret {
            assert!(is_secret_name(name), "{name} should be secret");
        }
        let ordinary = [
            "PATH",
            "LD_LIBRARY_PATH",
            "PYTHONPATH",
            "PATTERN",
            "FILE_PATTERN",
            "PASSAGE",
            "COMPASS",
            "BYPASS_CACHE",
            "AUTHOR",
            "GIT_AUTHOR_NAME",
            "XAUTHORITY",
            "OAUTHLIB_INSECURE",
            "PATCH_LEVEL",
            "HOME",
            "PWD",
            "LANG",
        ];
        for name in ordinary {
            assert!(!is_secret_name(name), "{name} should not be secret");
        }
    }

    #[test]
    fn url_credentials_make_a_value_secret() {
        let with = [
            "postgres://app:hunter22@db.internal:5432/app",
            "https://user:tok3n@example.com",
            "http://proxy.local:8080 https://u:p4ss@mirror/",
            "redis://:s3cret-pass@cache:6379",
        ];
        for v in with {
            assert!(is_secret_var("DATABASE_URL", v), "{v}");
            assert!(!is_secret_var("https_proxy", v) && !is_secret_var("ALL_PROXY", v), "proxies stay: {v}");
        }
        assert_eq!(url_passwords(with[0]).collect::<Vec<_>>(), ["hunter22"]);
        assert_eq!(url_passwords(with[2]).collect::<Vec<_>>(), ["p4ss"]);
        assert_eq!(url_passwords(with[3]).collect::<Vec<_>>(), ["s3cret-pass"]);
        let without = [
            "https://example.com/path?q=a:b@c",
            "ssh://git@github.com/x/y",
            "http://localhost:8080",
            "user:pass@host",
            "https://user:@host/",
            "/usr/bin:/bin",
        ];
        for v in without {
            assert!(!is_secret_var("SOME_URL", v), "{v}");
        }
        assert!(is_secret_var("DB_PASS", "x"), "a secret name needs no URL");
    }

    #[test]
    fn redacts_known_values_by_source_and_updates_live() {
        let s = Secrets::new();
        assert_eq!(s.redact("nothing known"), "nothing known");
        s.set("llm", ["sk-first-123456".to_string()]);
        s.set("config", ["tok-abcdefgh".to_string(), "short".to_string(), "  ".to_string()]);
        assert_eq!(s.len(), 2, "values under {MIN_SECRET_LEN} bytes are not kept");
        assert_eq!(s.redact("k=sk-first-123456 t=tok-abcdefgh short"), "k=[REDACTED] t=[REDACTED] short");
        // A new key replaces the old one of the same source.
        s.set("llm", ["sk-second-654321".to_string()]);
        let clone = s.clone();
        assert_eq!(clone.redact("sk-first-123456 sk-second-654321"), "sk-first-123456 [REDACTED]");
        // A value containing another is replaced whole.
        s.set("mcp", ["tok-abcdefgh-and-more".to_string()]);
        assert_eq!(s.redact("tok-abcdefgh-and-more"), "[REDACTED]");
        assert!(matches!(s.redact("clean"), Cow::Borrowed(_)));
        let dbg = format!("{s:?}");
        assert!(!dbg.contains("sk-second") && !dbg.contains("tok-abc"), "{dbg}");
    }

    #[test]
    fn encoded_forms_of_known_values_are_redacted() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        use base64::Engine as _;
        let key = "sk-live-0123456789abcdef?>";
        let s = Secrets::new();
        s.set("llm", [key.to_string()]);
        let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        let mixed: String =
            hex.chars().enumerate().map(|(i, c)| if i % 2 == 0 { c.to_ascii_uppercase() } else { c }).collect();
        for shown in [
            STANDARD.encode(key),
            STANDARD.encode(key).trim_end_matches('=').to_string(),
            URL_SAFE_NO_PAD.encode(key),
            hex.to_uppercase(),
            hex,
            mixed,
        ] {
            let text = format!("out: {shown}\n");
            assert_eq!(s.redact(&text), "out: [REDACTED]\n", "{shown}");
        }
        // Inside a longer base64 stream, at each of the three alignments: the characters that
        // depend on the key alone are gone.
        for prefix in ["", "a", "ab", "abc", "abcd"] {
            let stream = STANDARD.encode(format!("{prefix}{key}-and-more-text"));
            let out = s.redact(&stream);
            assert!(out.contains(REDACTED), "{prefix:?}: {out}");
            let decodable: String = out.replace(REDACTED, "");
            assert!(decodable.len() < stream.len() - 24, "{prefix:?}: {out}");
        }
        // A short value's encodings are short too: not looked for.
        s.set("llm", ["abcdef".to_string()]);
        assert!(encoded_forms("abcdef").iter().all(|f| f.len() >= MIN_FORM_LEN));
        assert_eq!(s.redact("YWJjZGVm"), "[REDACTED]", "the full base64 of a 6-byte value is 8 characters");
        assert_eq!(s.len(), 1, "len counts values, not forms");
    }

    #[test]
    fn values_split_by_line_breaks_or_between_stdout_and_stderr_are_redacted() {
        let key = "sk-live-0123456789abcdef";
        let s = Secrets::new();
        s.set("llm", [key.to_string()]);
        // `fold -w 10`, CRLF, and the exec result's stdout + "\n" + stderr join.
        for text in
            ["sk-live-01\n23456789ab\ncdef\n", "sk-live-01\r\n23456789abcdef", "out sk-live-0123\n456789abcdef err"]
        {
            let out = s.redact(text);
            assert!(!out.replace(['\n', '\r'], "").contains("0123456789"), "{text:?} -> {out:?}");
            assert!(out.contains(REDACTED), "{text:?} -> {out:?}");
        }
        assert_eq!(s.redact("a\nsk-live-01\n23456789abcdef\nb"), "a\n[REDACTED]\nb");
        // The split between stdout and stderr goes through the one redaction as one text.
        assert_eq!(s.redact("x\nsk-live-0123456789abcdef\n"), "x\n[REDACTED]\n");
        // Adjacent values stay two markers; text without a value is borrowed.
        s.set("config", ["tok-abcdefgh".to_string()]);
        assert_eq!(s.redact(&format!("{key}tok-abcdefgh")), "[REDACTED][REDACTED]");
        assert!(matches!(s.redact("clean\nlines\r\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn values_split_by_spaces_tabs_or_carriage_returns_are_redacted() {
        let key = "sk-live-0123456789abcdef";
        let s = Secrets::new();
        s.set("llm", [key.to_string()]);
        for text in [
            "sk-live-0123 456789abcdef",
            "sk-live-0123\t456789abcdef",
            "sk-live-0123\r456789abcdef",
            "s k - l i v e - 0 1 2 3 4 5 6 7 8 9 a b c d e f",
            "sk-live-01\t \r\n 23456789ab\x0bcd\x0cef",
            // stdout ending in a space, then the exec join's newline, then stderr
            "out sk-live-0123 \n456789abcdef err",
        ] {
            let out = s.redact(text);
            let flat = without_whitespace(&out);
            assert!(!flat.contains("0123456789") && !flat.contains(key), "{text:?} -> {out:?}");
            assert!(out.contains(REDACTED), "{text:?} -> {out:?}");
        }
        // Only the span goes; the whitespace around it stays.
        assert_eq!(s.redact("a sk-live-0123 456789abcdef\tb"), "a [REDACTED]\tb");
        assert_eq!(s.redact("key:\tsk-live-0123456789abcdef  "), "key:\t[REDACTED]  ");
        // A value with whitespace of its own is found however it is spaced.
        s.set("config", ["correct horse battery staple".to_string()]);
        for text in ["pw=correct horse battery staple;", "pw=correcthorse\tbattery\nstaple;"] {
            assert_eq!(s.redact(text), "pw=[REDACTED];", "{text:?}");
        }
        assert!(matches!(s.redact("plain words\tand lines\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn redaction_time_on_a_mebibyte_with_ten_secrets() {
        let s = Secrets::new();
        let keys: Vec<String> = (0..10).map(|i| format!("sk-secret-value-{i:02}-0123456789abcdef")).collect();
        s.set("config", keys.clone());
        let mut text = String::with_capacity(1 << 20);
        let mut i = 0;
        while text.len() < 1 << 20 {
            text.push_str("some ordinary tool output line with numbers 12345 and words\n");
            if i % 1000 == 0 {
                text.push_str(&keys[i / 1000 % 10]);
            }
            i += 1;
        }
        let t = std::time::Instant::now();
        let out = s.redact(&text);
        let with_forms = t.elapsed();
        let t = std::time::Instant::now();
        let mut plain = Cow::Borrowed(text.as_str());
        for k in &keys {
            if plain.contains(k.as_str()) {
                plain = Cow::Owned(plain.replace(k.as_str(), REDACTED));
            }
        }
        let values_only = t.elapsed();
        assert_eq!(out, plain);
        println!("1 MiB, 10 secrets: values only {values_only:?}, with encoded forms {with_forms:?}");
    }

    #[test]
    fn a_redact_only_value_is_redacted_in_every_form_and_not_held_in_clear() {
        use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
        use base64::Engine as _;
        let value = "ghp_Redact0nly/Value+9876543210zz";
        let s = Secrets::new();
        s.set("config", [value.to_string()]);
        let hex: String = crate::util::rand::to_hex(value.as_bytes());
        let spaced: String = value.chars().flat_map(|c| [c, ' ']).collect();
        let mixed_hex: String =
            hex.chars().enumerate().map(|(i, c)| if i % 3 == 0 { c.to_ascii_uppercase() } else { c }).collect();
        for shown in [
            value.to_string(),
            spaced.trim_end().to_string(),
            format!("{}\n{}", &value[..10], &value[10..]),
            STANDARD.encode(value),
            STANDARD_NO_PAD.encode(value),
            URL_SAFE.encode(value),
            URL_SAFE_NO_PAD.encode(value),
            hex.clone(),
            hex.to_uppercase(),
            mixed_hex,
        ] {
            assert_eq!(s.redact(&format!("a {shown} b")), "a [REDACTED] b", "{shown:?}");
        }
        for prefix in ["", "x", "xy", "xyz"] {
            for stream in [STANDARD.encode(format!("{prefix}{value}!")), URL_SAFE.encode(format!("{prefix}{value}!"))] {
                let out = s.redact(&stream);
                assert!(out.contains(REDACTED) && out.len() < stream.len() - 20, "{prefix:?}: {stream} -> {out}");
            }
        }
        // Near misses stay: another case of the plain value, one byte changed, a prefix.
        for text in [value.to_uppercase(), value.replace('9', "8"), value[..value.len() - 1].to_string()] {
            assert_eq!(s.redact(&text), text.as_str());
        }
        // Nothing the registry holds spells the value or any of its forms, even in part.
        let held = s.held_bytes();
        assert!(!held.is_empty());
        for form in [value.to_string(), hex, STANDARD.encode(value), URL_SAFE.encode(value)] {
            for piece in form.as_bytes().windows(6) {
                assert!(!held.windows(6).any(|w| w == piece), "{:?} is held", String::from_utf8_lossy(piece));
            }
        }
        assert!(!format!("{s:?}").contains("Redact0nly"));
        assert_eq!(s.redact(value), REDACTED);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn memfd_round_trip_and_foreign_descriptors_are_left_alone() {
        use std::os::fd::{AsRawFd, IntoRawFd};
        // (That the server closes it is checked through /proc in tests/suite/secrets.rs.)
        let pairs = vec![("CASHCODE_TOKEN".to_string(), "t0ken-value".to_string()), ("X_KEY".into(), "".into())];
        let fd = write_memfd(&pairs).expect("memfd").into_raw_fd();
        assert_eq!(read_handover(fd), Some(pairs));
        let other = std::fs::File::open("/proc/self/stat").expect("open");
        assert_eq!(read_handover(other.as_raw_fd()), None);
        assert!(other.metadata().is_ok(), "a foreign descriptor stays open");
        assert_eq!(read_handover(0), None);
        assert!(environ_block().is_some_and(|(s, e)| e > s), "env_start/env_end readable");
    }
}
