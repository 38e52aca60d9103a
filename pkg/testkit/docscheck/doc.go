// Package docscheck holds the tests of the repository's front door: the
// README stays short and leads to every page under docs/.
package docscheck
