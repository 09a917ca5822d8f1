// rankwise-run: see src/launch/ for the launcher's logic.
#include "launch/launcher.h"

int main(int argc, char** argv) { return rankwise::launch::main(argc, argv); }
