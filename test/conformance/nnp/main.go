// Command nnp stands in for the nonewprivs test image's program: installed setuid root, it
// prints the effective user ID it runs with, which is 0 unless no_new_privs kept the setuid
// bit from taking effect.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
