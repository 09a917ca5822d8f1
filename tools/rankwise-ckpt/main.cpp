// rankwise-ckpt: see src/checkpoint/tool/ for its commands (docs/checkpoint-tool.md).
#include <iostream>

#include "checkpoint/tool/ckpt_tool.h"

int main(int argc, char** argv) { return rankwise::checkpoint::tool::run(argc, argv, std::cout, std::cerr); }
