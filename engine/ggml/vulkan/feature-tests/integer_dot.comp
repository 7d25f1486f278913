#version 460
// Compiles only where glslc knows GL_EXT_integer_dot_product (ggml-vulkan's CMake asks).
#extension GL_EXT_integer_dot_product : require
layout(local_size_x = 1) in;
void main() {}
