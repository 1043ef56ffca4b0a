// Default locations shared by the daemon and its clients, so `kvtier` finds a `kvtierd` started
// with no arguments.
//
// Socket: $XDG_RUNTIME_DIR/kvtier/kvtierd.sock when XDG_RUNTIME_DIR is set (a per-user tmpfs on
// systemd machines), else /tmp/kvtier-<uid>/kvtierd.sock. Data directory: $KVTIER_DATA_DIR, else
// $XDG_STATE_HOME/kvtier, else $HOME/.local/state/kvtier, else /var/lib/kvtier for root.
#pragma once

#include <string>

namespace kvtier {

std::string DefaultSocketPath();
std::string DefaultDataDir();

}  // namespace kvtier
