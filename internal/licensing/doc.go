// Package licensing holds only tests: the repository's licence (LICENSE,
// Apache-2.0) is the one every package file names, each published module
// and package carries its text, and NOTICE keeps up with the modules
// linked into the baton binary.
package licensing
