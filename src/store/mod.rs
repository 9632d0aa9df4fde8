//! On-disk stores. Each owns its files and is their only writer; callers never build paths.

pub mod cache;
pub mod chats;
pub mod memory_files;
pub mod paging;
pub mod seq;
pub mod tail;
