//! Ahead-of-time kernel bundles: the clang offload bundle format, AMDGPU target-ID matching and
//! the bundle manifest.
//!
//! `cargo xtask build-kernels` compiles every `kernels/<name>.hip` module for several GPU
//! architectures into one uncompressed clang offload bundle, committed gzip-compressed as
//! `bundles/<name>.hipfb.gz`, and records what it built in `bundles/manifest.txt` (whose sizes
//! and hashes are of the uncompressed bundle). At run time [`crate::modules`] picks the code
//! object that matches the device out of the embedded bundle ([`Bundle::select`]).
//!
//! This file depends on nothing but `std`: the xtask and this crate's build script include it
//! (`#[path]`), so that the writer and the readers of bundles and manifests share one definition
//! of the format, of a module's full source ([`full_source`]) and of the manifest.
//!
//! ## The bundle format (uncompressed, as `clang-offload-bundler` writes it)
//!
//! ```text
//! "__CLANG_OFFLOAD_BUNDLE__"          24-byte magic
//! u64 entry count                      little-endian, like every integer below
//! per entry: u64 offset, u64 size, u64 id length, id bytes
//! entry data at offset..offset+size    (offsets from the start of the bundle, 4096-aligned)
//! ```
//!
//! Entry ids are `<offload kind>-<target triple>-<target id>`, e.g.
//! `hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-` (the triple's environment is empty, hence
//! `--`) or `host-x86_64-unknown-linux-gnu-` (the empty host entry). Compressed bundles (magic
//! `CCOB`, what `--offload-compress` writes) are recognised and rejected with a clear error: the
//! build writes uncompressed ones so that no decompressor is needed here.

use std::fmt;

/// The magic of an uncompressed clang offload bundle.
pub const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";

/// The magic of a compressed clang offload bundle (`--offload-compress`).
pub const COMPRESSED_MAGIC: &[u8; 4] = b"CCOB";

/// The processors `cargo xtask build-kernels` builds for by default (those its compiler
/// supports): CDNA1 (MI100, gfx908), CDNA2/3/4 (MI200, MI300, MI350), RDNA2 (gfx1030), RDNA3
/// (gfx1100-1102), RDNA3.5 (gfx1151) and RDNA4 (gfx1200/1201).
pub const DEFAULT_ARCHS: &[&str] = &[
    "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1151",
    "gfx1200", "gfx1201",
];

/// `e_machine` of an AMDGPU ELF code object.
pub const EM_AMDGPU: u16 = 224;

/// Why a byte string is not a usable offload bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BundleError {
    /// The data does not start with [`BUNDLE_MAGIC`] (nor [`COMPRESSED_MAGIC`]).
    NotABundle,
    /// A compressed bundle: rebuild without `--offload-compress`.
    Compressed {
        /// The compressed format's version, when it could be read.
        version: Option<u16>,
    },
    /// The header ends before what it announces.
    Truncated {
        /// What could not be read.
        what: String,
    },
    /// An entry's data lies (partly) outside the bundle.
    EntryOutOfBounds {
        /// The entry's id.
        id: String,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// The bundle's length.
        len: usize,
    },
    /// An entry id is not UTF-8.
    BadId {
        /// The entry's index.
        index: usize,
    },
    /// Two entries have the same id.
    DuplicateId {
        /// The id.
        id: String,
    },
}

impl fmt::Display for BundleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BundleError::NotABundle => write!(
                f,
                "not a clang offload bundle (no `__CLANG_OFFLOAD_BUNDLE__` magic)"
            ),
            BundleError::Compressed { version } => write!(
                f,
                "a compressed clang offload bundle (CCOB{}); only uncompressed bundles are \
                 supported: rebuild without --offload-compress (cargo xtask build-kernels does)",
                version.map_or(String::new(), |v| format!(" version {v}"))
            ),
            BundleError::Truncated { what } => {
                write!(f, "truncated offload bundle: cannot read {what}")
            }
            BundleError::EntryOutOfBounds {
                id,
                offset,
                size,
                len,
            } => write!(
                f,
                "offload bundle entry `{id}` ({size} bytes at offset {offset}) lies outside the \
                 {len}-byte bundle"
            ),
            BundleError::BadId { index } => {
                write!(
                    f,
                    "offload bundle entry {index} has an id that is not UTF-8"
                )
            }
            BundleError::DuplicateId { id } => {
                write!(f, "offload bundle has two entries with id `{id}`")
            }
        }
    }
}

impl std::error::Error for BundleError {}

/// One entry of a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The entry id, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`.
    pub id: &'a str,
    /// The entry's offset in the bundle.
    pub offset: u64,
    /// The entry's bytes (a code object for device entries; empty for the host entry).
    pub data: &'a [u8],
}

impl<'a> Entry<'a> {
    /// The offload kind: `hip`, `hipv4`, `host`, `openmp`, ...
    pub fn kind(&self) -> &'a str {
        self.id.split_once('-').map_or(self.id, |(k, _)| k)
    }

    /// The AMDGPU target id of a HIP device entry (`hip`/`hipv4` kind, `amdgcn-amd-amdhsa`
    /// triple), e.g. `gfx942:sramecc+:xnack-`; `None` for any other entry.
    pub fn amdgpu_target(&self) -> Option<TargetId<'a>> {
        let (kind, rest) = self.id.split_once('-')?;
        if kind != "hip" && kind != "hipv4" {
            return None;
        }
        let rest = rest.strip_prefix("amdgcn-amd-amdhsa-")?;
        // The triple's fourth component (environment) is normally empty (`--gfx942`); very old
        // bundles used a three-component triple (`-gfx906`).
        let target = if rest.starts_with("gfx") {
            rest
        } else {
            rest.split_once('-')?.1
        };
        TargetId::parse(target)
    }
}

/// A parsed offload bundle, borrowing the bundle's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle<'a> {
    /// The entries, in the order of the bundle's header.
    pub entries: Vec<Entry<'a>>,
}

/// Little-endian u64 reader over a byte slice that never reads out of bounds.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], BundleError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| BundleError::Truncated { what: what() })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, BundleError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

/// Parses an uncompressed clang offload bundle. Every offset and length is checked: malformed
/// input is an error, never a panic.
pub fn parse(bytes: &[u8]) -> Result<Bundle<'_>, BundleError> {
    if bytes.starts_with(COMPRESSED_MAGIC) {
        let version = bytes.get(4..6).map(|v| u16::from_le_bytes([v[0], v[1]]));
        return Err(BundleError::Compressed { version });
    }
    if !bytes.starts_with(BUNDLE_MAGIC) {
        return Err(BundleError::NotABundle);
    }
    let mut r = Reader {
        bytes,
        pos: BUNDLE_MAGIC.len(),
    };
    let count = r.u64(&|| "the entry count".into())?;
    // Every entry takes at least 24 header bytes: a count that cannot fit is malformed (and
    // must not drive an allocation).
    let room = (bytes.len() - r.pos) / 24;
    if count > room as u64 {
        return Err(BundleError::Truncated {
            what: format!("{count} entry headers (room for {room})"),
        });
    }
    let mut entries: Vec<Entry<'_>> = Vec::with_capacity(count as usize);
    for index in 0..count as usize {
        let offset = r.u64(&|| format!("the offset of entry {index}"))?;
        let size = r.u64(&|| format!("the size of entry {index}"))?;
        let id_len = r.u64(&|| format!("the id length of entry {index}"))?;
        let id_len = usize::try_from(id_len).map_err(|_| BundleError::Truncated {
            what: format!("the {id_len}-byte id of entry {index}"),
        })?;
        let id = r.take(id_len, &|| format!("the {id_len}-byte id of entry {index}"))?;
        let id = std::str::from_utf8(id).map_err(|_| BundleError::BadId { index })?;
        let out_of_bounds = || BundleError::EntryOutOfBounds {
            id: id.to_string(),
            offset,
            size,
            len: bytes.len(),
        };
        let start = usize::try_from(offset).map_err(|_| out_of_bounds())?;
        let end = usize::try_from(size)
            .ok()
            .and_then(|s| start.checked_add(s))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(out_of_bounds)?;
        if entries.iter().any(|e| e.id == id) {
            return Err(BundleError::DuplicateId { id: id.to_string() });
        }
        entries.push(Entry {
            id,
            offset,
            data: &bytes[start..end],
        });
    }
    Ok(Bundle { entries })
}

impl<'a> Bundle<'a> {
    /// The HIP AMDGPU device entries with their target ids, in bundle order.
    pub fn amdgpu_entries(&self) -> impl Iterator<Item = (TargetId<'a>, &Entry<'a>)> + '_ {
        self.entries
            .iter()
            .filter_map(|e| e.amdgpu_target().map(|t| (t, e)))
    }

    /// The entry to load on a device whose `gcnArchName` is `device_arch` (e.g.
    /// `gfx90a:sramecc+:xnack-`): among the entries built for the same processor whose
    /// features are each unspecified or equal to the device's ([`TargetId::runs_on`]), the most
    /// specific one (the most features specified; the first on a tie). `None` when none matches
    /// or `device_arch` is not a target id.
    pub fn select(&self, device_arch: &str) -> Option<(TargetId<'a>, Entry<'a>)> {
        let device = TargetId::parse(device_arch)?;
        let mut best: Option<(TargetId<'a>, Entry<'a>)> = None;
        for (t, e) in self.amdgpu_entries() {
            if t.runs_on(&device)
                && best
                    .as_ref()
                    .is_none_or(|(b, _)| t.features.len() > b.features.len())
            {
                best = Some((t, *e));
            }
        }
        best
    }

    /// The target ids of the AMDGPU entries, as written in the bundle.
    pub fn targets(&self) -> Vec<String> {
        self.amdgpu_entries().map(|(t, _)| t.to_string()).collect()
    }
}

/// An AMDGPU target id: a processor and target features, e.g. `gfx90a:sramecc+:xnack-`.
///
/// A feature that is not listed is "any": code built without `xnack` runs whatever the
/// device's xnack mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetId<'a> {
    /// The processor, e.g. `gfx90a`.
    pub processor: &'a str,
    /// The features, e.g. `[("sramecc", true), ("xnack", false)]` (`true` for `+`).
    pub features: Vec<(&'a str, bool)>,
}

impl<'a> TargetId<'a> {
    /// Parses `processor[:feature(+|-)]*`; `None` when malformed (empty processor, a feature
    /// without its sign, a feature given twice).
    pub fn parse(s: &'a str) -> Option<TargetId<'a>> {
        let mut parts = s.split(':');
        let processor = parts.next()?;
        let word = |w: &str| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        };
        if !word(processor) {
            return None;
        }
        let mut features: Vec<(&str, bool)> = Vec::new();
        for f in parts {
            let (name, on) = if let Some(n) = f.strip_suffix('+') {
                (n, true)
            } else {
                (f.strip_suffix('-')?, false)
            };
            if !word(name) || features.iter().any(|(n, _)| *n == name) {
                return None;
            }
            features.push((name, on));
        }
        Some(TargetId {
            processor,
            features,
        })
    }

    /// Whether code built for `self` runs on a device that reports `device`: same processor,
    /// and every feature `self` specifies is reported by the device with the same setting.
    pub fn runs_on(&self, device: &TargetId<'_>) -> bool {
        self.processor == device.processor
            && self
                .features
                .iter()
                .all(|f| device.features.iter().any(|d| d == f))
    }
}

impl fmt::Display for TargetId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.processor)?;
        for (name, on) in &self.features {
            write!(f, ":{name}{}", if *on { '+' } else { '-' })?;
        }
        Ok(())
    }
}

/// Whether `bytes` starts like a 64-bit little-endian AMDGPU ELF object (a code object).
pub fn is_amdgpu_elf(bytes: &[u8]) -> bool {
    bytes.len() >= 64
        && bytes.starts_with(b"\x7fELF")
        && bytes[4] == 2 // ELFCLASS64
        && bytes[5] == 1 // ELFDATA2LSB
        && u16::from_le_bytes([bytes[18], bytes[19]]) == EM_AMDGPU
}

/// The full source of module `name`: the prelude, then a `#line` directive so that diagnostics
/// name the module's own file and lines, then the module. Both the run-time compilation and
/// `cargo xtask build-kernels` compile (and hash) exactly this text.
pub fn full_source(prelude: &str, name: &str, module_source: &str) -> String {
    format!("{prelude}\n#line 1 \"{name}.hip\"\n{module_source}")
}

/// The manifest's file name in `bundles/`.
pub const MANIFEST_FILE: &str = "manifest.txt";

/// The manifest format written by this version.
pub const MANIFEST_FORMAT: u32 = 1;

/// What one module's bundle was built from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModuleRecord {
    /// The module name (`kernels/<name>.hip`, `bundles/<name>.hipfb.gz`).
    pub name: String,
    /// Hex SHA-256 of the module's [`full_source`].
    pub source_sha256: String,
    /// The compiler flags (besides `--offload-arch`, input and output).
    pub flags: String,
    /// The first line of the compiler's `--version`.
    pub compiler: String,
    /// The processors the bundle holds code objects for.
    pub archs: Vec<String>,
    /// The (uncompressed) bundle's size in bytes.
    pub bundle_size: u64,
    /// Hex SHA-256 of the uncompressed bundle (not of the committed `.hipfb.gz`).
    pub bundle_sha256: String,
}

/// `bundles/manifest.txt`: what the committed bundles were built from.
///
/// A line-oriented text format (no parser dependency): `key = value` lines, `#` comments, and
/// a `[module NAME]` line opening each module's section. Written sorted, without timestamps, so
/// that rebuilding unchanged sources changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    /// Hex SHA-256 of `kernels/prelude.h`.
    pub prelude_sha256: String,
    /// The first line of the compiler's `--version`.
    pub compiler: String,
    /// The flags every module was compiled with (a module's own record adds its `-cuid`).
    pub flags: String,
    /// The processors built.
    pub archs: Vec<String>,
    /// Requested processors the compiler does not support (skipped).
    pub skipped_archs: Vec<String>,
    /// The modules, sorted by name.
    pub modules: Vec<ModuleRecord>,
}

impl Manifest {
    /// The record of module `name`.
    pub fn module(&self, name: &str) -> Option<&ModuleRecord> {
        self.modules.iter().find(|m| m.name == name)
    }

    /// Parses a manifest written by [`Manifest::render`].
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let mut m = Manifest::default();
        let mut format = None;
        let mut current: Option<ModuleRecord> = None;
        let words = |v: &str| -> Vec<String> { v.split_whitespace().map(str::to_string).collect() };
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            let at = |msg: &str| format!("manifest line {}: {msg}: `{raw}`", i + 1);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line
                .strip_prefix("[module ")
                .and_then(|r| r.strip_suffix(']'))
            {
                let name = name.trim();
                if name.is_empty() || m.module(name).is_some() {
                    return Err(at("empty or repeated module name"));
                }
                if let Some(done) = current.take() {
                    m.modules.push(done);
                }
                current = Some(ModuleRecord {
                    name: name.to_string(),
                    ..ModuleRecord::default()
                });
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| at("expected `key = value`"))?;
            match current.as_mut() {
                None => match key {
                    "format" => format = Some(value.parse::<u32>().map_err(|_| at("bad format"))?),
                    "prelude_sha256" => m.prelude_sha256 = value.to_string(),
                    "compiler" => m.compiler = value.to_string(),
                    "flags" => m.flags = value.to_string(),
                    "archs" => m.archs = words(value),
                    "skipped_archs" => m.skipped_archs = words(value),
                    _ => {} // unknown keys are for newer readers
                },
                Some(r) => match key {
                    "source_sha256" => r.source_sha256 = value.to_string(),
                    "flags" => r.flags = value.to_string(),
                    "compiler" => r.compiler = value.to_string(),
                    "archs" => r.archs = words(value),
                    "bundle_size" => {
                        r.bundle_size = value.parse().map_err(|_| at("bad bundle_size"))?
                    }
                    "bundle_sha256" => r.bundle_sha256 = value.to_string(),
                    _ => {}
                },
            }
        }
        if let Some(done) = current.take() {
            m.modules.push(done);
        }
        match format {
            Some(MANIFEST_FORMAT) => {}
            Some(f) => {
                return Err(format!(
                    "manifest format {f}; this version reads format {MANIFEST_FORMAT}"
                ))
            }
            None => return Err("manifest has no `format = ` line".into()),
        }
        for r in &m.modules {
            if r.source_sha256.len() != 64 {
                return Err(format!("manifest module `{}` has no source_sha256", r.name));
            }
        }
        m.modules.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(m)
    }

    /// The manifest's text: deterministic (modules sorted by name, no timestamps).
    pub fn render(&self) -> String {
        let mut modules: Vec<&ModuleRecord> = self.modules.iter().collect();
        modules.sort_by(|a, b| a.name.cmp(&b.name));
        let mut s = String::new();
        s.push_str(
            "# rocm-kernels ahead-of-time bundles: written by `cargo xtask build-kernels`; do not edit.\n\
             # `[module NAME]` describes bundles/NAME.hipfb, built from kernels/prelude.h + kernels/NAME.hip;\n\
             # hashes are hex SHA-256 (source_sha256: of the full source the loader also hashes).\n",
        );
        let kv = |s: &mut String, key: &str, value: &str| {
            // No trailing blank for an empty value.
            s.push_str(key);
            s.push_str(if value.is_empty() { " =" } else { " = " });
            s.push_str(value);
            s.push('\n');
        };
        kv(&mut s, "format", &MANIFEST_FORMAT.to_string());
        kv(&mut s, "prelude_sha256", &self.prelude_sha256);
        kv(&mut s, "compiler", &self.compiler);
        kv(&mut s, "flags", &self.flags);
        kv(&mut s, "archs", &self.archs.join(" "));
        kv(&mut s, "skipped_archs", &self.skipped_archs.join(" "));
        for r in modules {
            s.push_str(&format!("\n[module {}]\n", r.name));
            kv(&mut s, "source_sha256", &r.source_sha256);
            kv(&mut s, "flags", &r.flags);
            kv(&mut s, "compiler", &r.compiler);
            kv(&mut s, "archs", &r.archs.join(" "));
            kv(&mut s, "bundle_size", &r.bundle_size.to_string());
            kv(&mut s, "bundle_sha256", &r.bundle_sha256);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle as clang-offload-bundler lays it out: header, then entries at 4096-aligned
    /// offsets.
    fn build(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let header_len: usize =
            BUNDLE_MAGIC.len() + 8 + entries.iter().map(|(id, _)| 24 + id.len()).sum::<usize>();
        let mut offsets = Vec::new();
        let mut pos = header_len.next_multiple_of(4096);
        for (_, data) in entries {
            offsets.push(pos);
            pos = (pos + data.len()).next_multiple_of(4096);
        }
        let mut out = BUNDLE_MAGIC.to_vec();
        out.extend((entries.len() as u64).to_le_bytes());
        for ((id, data), off) in entries.iter().zip(&offsets) {
            out.extend((*off as u64).to_le_bytes());
            out.extend((data.len() as u64).to_le_bytes());
            out.extend((id.len() as u64).to_le_bytes());
            out.extend(id.as_bytes());
        }
        for ((_, data), off) in entries.iter().zip(&offsets) {
            out.resize(*off, 0);
            out.extend(*data);
        }
        out
    }

    fn elf() -> Vec<u8> {
        let mut e = vec![0u8; 64];
        e[..4].copy_from_slice(b"\x7fELF");
        e[4] = 2;
        e[5] = 1;
        e[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        e
    }

    #[test]
    fn parses_entries_and_their_targets() {
        let (a, b) = (elf(), b"second".to_vec());
        let bytes = build(&[
            ("host-x86_64-unknown-linux-gnu-", b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a", &a),
            ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", &b),
            ("hip-amdgcn-amd-amdhsa-gfx906", b"old"),
        ]);
        let bundle = parse(&bytes).unwrap();
        assert_eq!(bundle.entries.len(), 4);
        assert_eq!(bundle.entries[0].kind(), "host");
        assert!(bundle.entries[0].data.is_empty());
        assert_eq!(bundle.entries[0].amdgpu_target(), None);
        assert_eq!(bundle.entries[1].data, &a[..]);
        assert!(is_amdgpu_elf(bundle.entries[1].data));
        assert!(!is_amdgpu_elf(bundle.entries[2].data));
        assert_eq!(bundle.entries[2].data, b"second");
        assert_eq!(
            bundle.targets(),
            ["gfx90a", "gfx942:sramecc+:xnack-", "gfx906"]
        );
        let t = bundle.entries[2].amdgpu_target().unwrap();
        assert_eq!(t.processor, "gfx942");
        assert_eq!(t.features, [("sramecc", true), ("xnack", false)]);
    }

    #[test]
    fn an_empty_bundle_parses() {
        assert_eq!(parse(&build(&[])).unwrap().entries, []);
    }

    #[test]
    fn recognises_compressed_and_foreign_data() {
        let mut ccob = b"CCOB".to_vec();
        ccob.extend(2u16.to_le_bytes());
        ccob.extend([0u8; 30]);
        let e = parse(&ccob).unwrap_err();
        assert_eq!(e, BundleError::Compressed { version: Some(2) });
        assert!(e.to_string().contains("compressed"), "{e}");
        assert_eq!(
            parse(b"CCOB").unwrap_err(),
            BundleError::Compressed { version: None }
        );
        assert_eq!(parse(&elf()).unwrap_err(), BundleError::NotABundle);
        assert_eq!(parse(b"").unwrap_err(), BundleError::NotABundle);
    }

    #[test]
    fn malformed_input_is_an_error_never_a_panic() {
        let good = build(&[
            ("host-x86_64-unknown-linux-gnu-", b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx1100", &elf()),
        ]);
        // Every truncation of the header fails cleanly; truncating the data is out of bounds.
        for n in 0..good.len() {
            assert!(parse(&good[..n]).is_err(), "prefix of {n} bytes parsed");
        }
        // Corrupt every byte of the header (and its padding) in turn: any result but a panic
        // is fine.
        for i in 0..4096 {
            for v in [0u8, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[i] = v;
                let _ = parse(&bad);
            }
        }
        // Huge counts, offsets, sizes and id lengths.
        let field = |at: usize, v: u64| {
            let mut bad = good.clone();
            bad[at..at + 8].copy_from_slice(&v.to_le_bytes());
            parse(&bad).map(|_| ())
        };
        let first = BUNDLE_MAGIC.len() + 8;
        assert!(matches!(
            field(BUNDLE_MAGIC.len(), u64::MAX),
            Err(BundleError::Truncated { .. })
        ));
        assert!(matches!(
            field(first, u64::MAX),
            Err(BundleError::EntryOutOfBounds { .. })
        ));
        assert!(matches!(
            field(first + 8, u64::MAX),
            Err(BundleError::EntryOutOfBounds { .. })
        ));
        let second = first + 24 + 30;
        assert!(matches!(
            field(second, u64::MAX - 8),
            Err(BundleError::EntryOutOfBounds { .. })
        ));
        assert!(matches!(
            field(first + 16, u64::MAX),
            Err(BundleError::Truncated { .. })
        ));
        // Non-UTF-8 ids and duplicate ids.
        let mut bad = good.clone();
        bad[first + 24] = 0xff;
        assert_eq!(parse(&bad).unwrap_err(), BundleError::BadId { index: 0 });
        let e: (&str, &[u8]) = ("hipv4-amdgcn-amd-amdhsa--gfx90a", b"");
        let dup = build(&[e, e]);
        assert!(matches!(parse(&dup), Err(BundleError::DuplicateId { .. })));
    }

    #[test]
    fn target_ids_parse_strictly() {
        let t = TargetId::parse("gfx90a:sramecc+:xnack-").unwrap();
        assert_eq!(t.processor, "gfx90a");
        assert_eq!(t.to_string(), "gfx90a:sramecc+:xnack-");
        assert_eq!(TargetId::parse("gfx1100").unwrap().features, []);
        for bad in [
            "",
            ":xnack+",
            "gfx90a:",
            "gfx90a:xnack",
            "gfx90a:xnack+:xnack-",
            "gfx 90a",
        ] {
            assert_eq!(TargetId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn matching_honours_target_features() {
        let id = |s| TargetId::parse(s).unwrap();
        let dev = id("gfx90a:sramecc+:xnack-");
        assert!(id("gfx90a").runs_on(&dev));
        assert!(id("gfx90a:xnack-").runs_on(&dev));
        assert!(id("gfx90a:sramecc+:xnack-").runs_on(&dev));
        assert!(id("gfx90a:xnack-:sramecc+").runs_on(&dev));
        assert!(!id("gfx90a:xnack+").runs_on(&dev));
        assert!(!id("gfx90a:sramecc-").runs_on(&dev));
        assert!(!id("gfx942").runs_on(&dev));
        assert!(!id("gfx90").runs_on(&dev));
        // A feature the device does not report is not "equal".
        assert!(!id("gfx1100:xnack-").runs_on(&id("gfx1100")));
        assert!(id("gfx1100").runs_on(&id("gfx1100")));
    }

    #[test]
    fn select_prefers_the_most_specific_match() {
        let any = build(&[
            ("host-x86_64-unknown-linux-gnu-", b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a", b"any"),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", b"xnack+"),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", b"both"),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", b"xnack-"),
            ("hipv4-amdgcn-amd-amdhsa--gfx942", b"942"),
            ("openmp-amdgcn-amd-amdhsa--gfx1100", b"omp"),
        ]);
        let b = parse(&any).unwrap();
        let pick = |arch: &str| b.select(arch).map(|(_, e)| e.data);
        assert_eq!(pick("gfx90a:sramecc+:xnack-"), Some(&b"both"[..]));
        assert_eq!(pick("gfx90a:sramecc-:xnack-"), Some(&b"xnack-"[..]));
        assert_eq!(pick("gfx90a:sramecc-:xnack+"), Some(&b"xnack+"[..]));
        assert_eq!(pick("gfx90a"), Some(&b"any"[..]));
        assert_eq!(pick("gfx942:sramecc+:xnack-"), Some(&b"942"[..]));
        // OpenMP entries and the host entry are never picked; nor is anything for a bad arch.
        assert_eq!(pick("gfx1100"), None);
        assert_eq!(pick("sm_90"), None);
        assert_eq!(pick(""), None);
        let (t, _) = b.select("gfx90a:sramecc+:xnack-").unwrap();
        assert_eq!(t.to_string(), "gfx90a:sramecc+:xnack-");
    }

    #[test]
    fn full_source_is_prelude_line_directive_module() {
        assert_eq!(
            full_source("P", "unary", "M"),
            "P\n#line 1 \"unary.hip\"\nM"
        );
    }

    #[test]
    fn manifests_round_trip_sorted() {
        let rec = |name: &str| ModuleRecord {
            name: name.into(),
            source_sha256: "a".repeat(64),
            flags: "-O3 -std=c++17".into(),
            compiler: "clang version 21".into(),
            archs: vec!["gfx90a".into(), "gfx1100".into()],
            bundle_size: 12345,
            bundle_sha256: "b".repeat(64),
        };
        let m = Manifest {
            prelude_sha256: "c".repeat(64),
            compiler: "clang version 21".into(),
            flags: "-O3".into(),
            archs: vec!["gfx90a".into(), "gfx1100".into()],
            skipped_archs: vec![],
            modules: vec![rec("unary"), rec("binary")],
        };
        let text = m.render();
        assert!(!text.lines().any(|l| l.ends_with(' ')), "{text}");
        assert!(text.find("[module binary]").unwrap() < text.find("[module unary]").unwrap());
        let back = Manifest::parse(&text).unwrap();
        assert_eq!(back.modules[0], rec("binary"));
        assert_eq!(back.module("unary"), Some(&rec("unary")));
        assert_eq!(back.render(), text);
        assert!(Manifest::parse("").is_err());
        assert!(Manifest::parse("format = 99\n").is_err());
        assert!(Manifest::parse("format = 1\n[module x]\n").is_err());
        assert!(Manifest::parse("format = 1\nnonsense\n").is_err());
    }
}
