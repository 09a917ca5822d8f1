#pragma once
// What a writer killed mid-save (kill -9, the launcher stopping a failed
// job) leaves beside a checkpoint: AtomicFile's "<path>.tmp.<pid>.XXXXXX"
// files and save_sharded's "<dir>.rankwise-tmp.XXXXXX" directories.
#include <string>
#include <vector>

namespace rankwise::checkpoint::io {

/// Removes the leftovers of earlier saves to `path` (a file or a sharded
/// checkpoint's directory) from the directory that holds it, and returns
/// their names: files (or links) "<name>.tmp.<pid>.XXXXXX" and directories
/// "<name>.rankwise-tmp.XXXXXX", nothing else. Call only while holding `path`'s lock (FileLock): a save in
/// progress holds it, so what is found then is a killed writer's. Entries
/// of other checkpoints in that directory are left alone. Errors are ignored
/// (a leftover that cannot be removed only takes space).
std::vector<std::string> remove_leftovers_of(const std::string& path);

/// remove_leftovers_of(path), with a note on stderr (note.h) naming what
/// was removed, if anything. `who` names the caller, e.g. "save_sharded".
/// In a directory a (Sharded)CheckpointManager keeps (it has
/// `rankwise.lock`), only a caller that holds that lock (`holds_directory_lock`:
/// the manager's own saves) removes anything: `path`.lock does not exclude
/// the manager, whose save in progress would look like a leftover. The
/// manager removes them itself when it starts.
void remove_leftovers_with_note(const std::string& path, const std::string& who, bool holds_directory_lock);

}  // namespace rankwise::checkpoint::io
