// Package atomicfile is the one way berth replaces a file that must
// survive a crash whole: what one agent leaves for the next in its
// data_dir (the session to resume, the jobs waiting to restart; package
// handover), the fencing tokens handed out and the claim file jobs read
// (package fencing). A reader finds the old content or the new, never a
// part.
//
// It is written here rather than taken from a library (renameio and the
// like name each temporary file anew): a crash between the write and the
// rename then leaves one stray file per crash in data_dir, where this
// package's fixed name is overwritten by the next write.
package atomicfile
