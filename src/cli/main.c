/* Placeholder until the CLI lands. */
#include <stdio.h>
int main(void)
{
	fputs("ushuffle: not implemented yet\n", stderr);
	return 2;
}
