//! Files as dsh touches them. Writes are durable: every profile file is replaced atomically
//! (temporary file in the same directory, fsync, rename, fsync of the directory), and creating a
//! file never overwrites one. Reads are bounded: every file dsh reads whole is opened once,
//! must be a regular file (a FIFO, a device such as `/dev/zero` or a folder — also behind a
//! symlink — is refused at once, never read or waited on) and is read up to its kind's limit.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most a small settings file dsh reads whole may hold: `profile.yml`, `sessions.toml`, a
/// session's `dsh.json`, a package's `dsh-plugin.toml` or `Cargo.toml` (real ones hold a few
/// hundred bytes).
pub const MAX_SETTINGS_FILE_BYTES: usize = 1024 * 1024;

/// The longest layer file dsh reads: real layers are a few kilobytes; a layer this long at
/// `profile::yaml::MAX_VALUES` values composes in bounded memory (the README's figure).
pub const MAX_LAYER_BYTES: usize = 16 * 1024 * 1024;

/// Opens `path` for reading if it is a regular file. The open itself never blocks (a FIFO with
/// no writer would hold it forever), and the check is made on what was opened.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    let what = match () {
        () if kind.is_dir() => "a folder",
        () if kind.is_fifo() => "a FIFO",
        () if kind.is_char_device() || kind.is_block_device() => "a device",
        () if kind.is_socket() => "a socket",
        () => "not a plain file",
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("it is {what}, not a regular file")))
}

/// The whole of the regular file at `path`, refused when it holds more than `limit` bytes (a
/// `what` names the kind of file in the message: `a layer`).
pub fn read_limited(path: &Path, limit: usize, what: &str) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_regular(path)?.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        let message = format!("it is longer than the {} {what} may hold", size_text(limit));
        return Err(io::Error::new(io::ErrorKind::InvalidData, message));
    }
    Ok(bytes)
}

/// [`read_limited`] as UTF-8 text.
pub fn read_text_limited(path: &Path, limit: usize, what: &str) -> io::Result<String> {
    String::from_utf8(read_limited(path, limit, what)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

/// The sha256 of `bytes`, in lowercase hex: how dsh names what it verified or keeps.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// `16 MiB`, `64 KiB` or `100 bytes`.
pub fn size_text(bytes: usize) -> String {
    match bytes {
        bytes if bytes >= 1 << 20 && bytes % (1 << 20) == 0 => format!("{} MiB", bytes >> 20),
        bytes if bytes >= 1 << 10 && bytes % (1 << 10) == 0 => format!("{} KiB", bytes >> 10),
        bytes => format!("{bytes} bytes"),
    }
}

/// Makes a directory entry change (create, rename) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A temporary file in `dir`, to be renamed into place, created with the mode any editor would
/// give a new file (the user's umask), not tempfile's 0600.
pub fn temp_file_in(dir: &Path, prefix: &str) -> io::Result<tempfile::NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    builder.tempfile_in(dir)
}

/// A temporary file next to `path` holding `contents`, durable, with the mode `path` has (or,
/// for a new file, the user's umask).
fn staged(path: &Path, contents: &[u8]) -> io::Result<tempfile::NamedTempFile> {
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut file = temp_file_in(dir, ".dsh-tmp-")?;
    if let Ok(existing) = std::fs::metadata(path) {
        file.as_file().set_permissions(existing.permissions())?;
    }
    file.write_all(contents)?;
    file.as_file().sync_all()?;
    Ok(file)
}

/// Replaces `path` with `contents` atomically: readers see the old file or the new one, never a
/// mix, and a crash leaves one of the two.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    staged(path, contents)?.persist(path).map_err(|err| err.error)?;
    sync_parent(path)
}

/// Creates `path` with `contents` atomically unless it exists; returns whether it was created.
pub fn create_atomic(path: &Path, contents: &[u8]) -> io::Result<bool> {
    match staged(path, contents)?.persist_noclobber(path) {
        Ok(_) => {
            sync_parent(path)?;
            Ok(true)
        }
        Err(err) if err.error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(err.error),
    }
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        Some(dir) => sync_dir(dir),
        None => sync_dir(Path::new(".")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_replaced_file_keeps_its_mode_and_a_new_one_follows_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let kept = dir.path().join("kept.yml");
        std::fs::write(&kept, "old").unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&kept, b"new").unwrap();
        assert_eq!(mode(&kept), 0o640);
        let by_an_editor = dir.path().join("editor.yml");
        File::create(&by_an_editor).unwrap();
        let created = dir.path().join("new.yml");
        assert!(create_atomic(&created, b"text").unwrap());
        assert_eq!(mode(&created), mode(&by_an_editor));
    }

    #[test]
    fn a_device_a_fifo_or_a_folder_is_refused_at_once_and_a_long_file_one_byte_over() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero.yml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let fifo = dir.path().join("fifo.yml");
        let made = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(made.as_ptr(), 0o600) }, 0);
        let refused = |path: &Path| read_limited(path, 10, "a layer").unwrap_err().to_string();
        assert_eq!(refused(&zero), "it is a device, not a regular file");
        assert_eq!(refused(&fifo), "it is a FIFO, not a regular file");
        assert_eq!(refused(dir.path()), "it is a folder, not a regular file");
        let long = dir.path().join("long.yml");
        std::fs::write(&long, [b'a'; 11]).unwrap();
        assert_eq!(refused(&long), "it is longer than the 10 bytes a layer may hold");
        std::fs::write(&long, [b'a'; 10]).unwrap();
        assert_eq!(read_limited(&long, 10, "a layer").unwrap().len(), 10);
        assert_eq!(size_text(16 << 20), "16 MiB");
    }

    #[test]
    fn create_never_overwrites_and_write_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.yml");
        assert!(create_atomic(&path, b"first").unwrap());
        assert!(!create_atomic(&path, b"second").unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        write_atomic(&path, b"third").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary files are left behind");
    }
}
