#pragma once
/// \file launcher.h
/// Entry point of `rankwise-run`, the torchrun-like launcher: it starts
/// `--nproc-per-node` copies of a program on this node, hosts the rendezvous
/// store (node 0), merges and tags the workers' output, and stops every worker
/// when one fails.
///
/// Exit codes: 0 every worker succeeded; 1 a worker failed (the summary on
/// stderr names the first failure); 2 bad usage or configuration; 128+n the
/// launcher was ended by signal n (forwarded to every worker first).

namespace rankwise::launch {

/// Runs the launcher with the process's command line and returns its exit code.
int main(int argc, char** argv);

}  // namespace rankwise::launch
