//! Durable file writes: every profile file is replaced atomically (temporary file in the same
//! directory, fsync, rename, fsync of the directory), and creating a file never overwrites one.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

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
