//! On-disk stores. Each owns its files and is their only writer; callers never build paths.

pub(crate) mod cache;
pub mod chats;
pub mod memory_files;
pub(crate) mod paging;
pub(crate) mod replay;
pub(crate) mod seq;
pub(crate) mod tail;
