//! The content-addressed blob store of the checkpoints: one file per distinct content, named
//! by its SHA-256 under `blobs/<first two hex>/`, 0600 in 0700 directories. Written through a
//! temp file and a rename (never half a blob under its name), without fsync: a blob is a copy
//! of a workspace file whose own writes are not synced either. Called under the checkpoint
//! store's lock, on the thread of the hook or rewind that needs it.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::util::fsx;

pub(crate) struct Blobs {
    dir: PathBuf,
}

impl Blobs {
    pub(crate) fn new(dir: &Path) -> Blobs {
        Blobs { dir: dir.to_path_buf() }
    }

    fn path(&self, hash: &str) -> PathBuf {
        self.dir.join(&hash[..2.min(hash.len())]).join(hash)
    }

    /// Stores `bytes` unless the same content is already there; returns its hash and whether
    /// it was newly written.
    pub(crate) fn put(&self, bytes: &[u8]) -> io::Result<(String, bool)> {
        let hash = crate::util::hash::sha256_hex(bytes);
        let path = self.path(&hash);
        if path.is_file() {
            return Ok((hash, false));
        }
        let parent = path.parent().ok_or_else(|| io::Error::other("blob path has no parent"))?;
        fsx::create_private_dirs(parent)?;
        let tmp = parent.join(format!(".{hash}.{}.tmp", crate::util::rand::hex(6)));
        let written = (|| {
            let mut f = fsx::private_options().write(true).create_new(true).open(&tmp)?;
            f.write_all(bytes)?;
            drop(f);
            fs::rename(&tmp, &path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written.map(|_| (hash, true))
    }

    pub(crate) fn read(&self, hash: &str) -> io::Result<Vec<u8>> {
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(io::Error::other("not a blob name"));
        }
        fs::read(self.path(hash))
    }

    pub(crate) fn remove(&self, hash: &str) {
        let _ = fs::remove_file(self.path(hash));
    }

    /// Every stored blob with its size (temp files of an interrupted write are removed).
    pub(crate) fn list(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let Ok(fans) = fs::read_dir(&self.dir) else { return out };
        for fan in fans.flatten() {
            let Ok(rd) = fs::read_dir(fan.path()) else { continue };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    let _ = fs::remove_file(e.path());
                } else if let Ok(m) = e.metadata() {
                    out.push((name, m.len()));
                }
            }
        }
        out
    }
}
