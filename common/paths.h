// Default locations shared by the daemon and its clients, so `kvtier` finds a `kvtierd` started
// with no arguments.
//
// Socket: $XDG_RUNTIME_DIR/kvtier/kvtierd.sock when XDG_RUNTIME_DIR is set (a per-user tmpfs on
// systemd machines), else /tmp/kvtier-<uid>/kvtierd.sock. Data directory: $KVTIER_DATA_DIR, else
// $XDG_STATE_HOME/kvtier, else $HOME/.local/state/kvtier, else /var/lib/kvtier for root.
//
// The fallback under /tmp (/tmp/kvtier-<uid>) is a name any user can take first: another user who
// made it could swap in a socket of their own and serve poisoned blocks, or read the KV clients
// send. The daemon and its clients use it only when it is a directory of this user's that no one
// else may write (CheckPrivateDirectory), as tmux and ssh-agent do with theirs.
#pragma once

#include <string>

#include "common/status.h"

namespace kvtier {

std::string DefaultSocketPath();
std::string DefaultDataDir();

// /tmp/kvtier-<uid>: where the defaults fall back to without XDG_RUNTIME_DIR (or HOME).
std::string TmpFallbackDir();
// Whether `path` lies in TmpFallbackDir().
bool InTmpFallbackDir(const std::string& path);
// kPermissionDenied, naming the directory and what to do, unless `dir` is a directory (not a
// symbolic link) owned by this process's user and not writable by its group or others; the
// translated errno of lstat (kNotFound when it does not exist).
Status CheckPrivateDirectory(const std::string& dir);
// Creates TmpFallbackDir() (mode 0755) when missing, then CheckPrivateDirectory.
Status PrepareTmpFallbackDir();

}  // namespace kvtier
