pub(crate) mod block;
pub(crate) mod block_v2;
pub(crate) mod row;
pub(crate) mod row_codec_v2;
pub(crate) mod sst;
