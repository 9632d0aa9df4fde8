//! Checkpoint stores of project directories outside the workspace (a chat bound to a project,
//! `src/projects.rs`): one [`Checkpoints`] per project root under
//! `<data>/checkpoints/projects/<digest of the root>`, opened when a turn or a rewind first
//! needs it, with the workspace store's exclusions and byte budget. At most [`MAX_OPEN`] are
//! kept open (each holds an inotify watch); the least recently used is closed first, its
//! records stay on disk and load again when it is next opened. Used on `worker-N` and the
//! `http` threads that rewind.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{CheckpointConfig, Checkpoints};

/// Project stores open at once.
pub(crate) const MAX_OPEN: usize = 16;

pub struct ProjectCheckpoints {
    /// `<data>/checkpoints/projects`.
    base: PathBuf,
    skip: Vec<PathBuf>,
    max_bytes: u64,
    /// Most recently used last.
    open: Mutex<VecDeque<(PathBuf, Arc<Checkpoints>)>>,
}

impl ProjectCheckpoints {
    pub fn new(base: PathBuf, skip: Vec<PathBuf>, max_bytes: u64) -> ProjectCheckpoints {
        ProjectCheckpoints { base, skip, max_bytes, open: Mutex::new(VecDeque::new()) }
    }

    /// The store of the (canonical) project root, opened now if it is not; `None` when it
    /// cannot be opened (logged): the turn then runs without rewind for that project.
    pub fn get(&self, root: &Path) -> Option<Arc<Checkpoints>> {
        let mut open = crate::util::sync::lock(&self.open);
        if let Some(i) = open.iter().position(|(r, _)| r == root) {
            let entry = open.remove(i)?;
            let store = Arc::clone(&entry.1);
            open.push_back(entry);
            return Some(store);
        }
        let dir = self.base.join(&crate::util::hash::sha256_hex(root.as_os_str().as_encoded_bytes())[..16]);
        let cfg = CheckpointConfig {
            root: dir,
            workspace: root.to_path_buf(),
            skip: self.skip.clone(),
            max_bytes: self.max_bytes,
            pause_after: None,
        };
        match Checkpoints::open(cfg) {
            Ok(store) => {
                if open.len() >= MAX_OPEN {
                    open.pop_front();
                }
                open.push_back((root.to_path_buf(), Arc::clone(&store)));
                Some(store)
            }
            Err(e) => {
                log::error!("event=checkpoints.project_open_failed error_kind={:?}", e.kind());
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_store_per_root_reused_and_bounded() {
        let base = std::env::temp_dir().join(format!("cc-cp-projects-{}", crate::util::rand::hex(6)));
        let roots: Vec<PathBuf> = (0..=MAX_OPEN).map(|i| base.join(format!("p{i}"))).collect();
        for r in &roots {
            std::fs::create_dir_all(r).unwrap();
        }
        let set = ProjectCheckpoints::new(base.join("data/checkpoints/projects"), Vec::new(), 1 << 20);
        let a = set.get(&roots[0]).unwrap();
        assert!(Arc::ptr_eq(&a, &set.get(&roots[0]).unwrap()), "the open store is reused");
        let b = set.get(&roots[1]).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        set.get(&roots[0]).unwrap();
        for r in &roots[2..] {
            set.get(r).unwrap();
        }
        assert_eq!(crate::util::sync::lock(&set.open).len(), MAX_OPEN);
        // The least recently used (p1; p0 was used after it) was closed; p0 is still the same.
        assert!(Arc::ptr_eq(&a, &set.get(&roots[0]).unwrap()));
        assert!(!crate::util::sync::lock(&set.open).iter().any(|(r, _)| r == &roots[1]));
        let _ = std::fs::remove_dir_all(&base);
    }
}
