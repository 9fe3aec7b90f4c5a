/* abi_fields.h — every field of every ABI struct as of ABI 1.0, as an
 * X-macro list: X(struct type, field). Compiled once against the frozen
 * v1.0 headers (tests/abi/v1_0) and once against the current headers, the
 * offsets and sizes must agree field by field: structs only grow at the end.
 * A new minor version appends its new fields in a new list (ABI_V1_1_FIELDS
 * ...) and the test compares that minor's frozen copy the same way. */
#ifndef ABI_FIELDS_H
#define ABI_FIELDS_H

/* S(type, size in ABI 1.0 on x86-64/AArch64, grows): value types (grows 0)
 * never change size in major 1; tables and argument structs (grows 1) only
 * grow, and their 1.0 size is pinned by ONYX_ABI_V1_0_*_SIZE. */
#define ABI_V1_0_STRUCTS(S)                                                                        \
  S(OnyxMemoryDevice, 24, 0)                                                                       \
  S(OnyxExtension, 24, 0)                                                                          \
  S(OnyxTypeConstraint, 24, 0)                                                                     \
  S(OnyxAlias, 12, 0)                                                                              \
  S(OnyxFormalParam, 24, 0)                                                                        \
  S(OnyxAttrDef, 48, 0)                                                                            \
  S(OnyxDeviceInfo, ONYX_ABI_V1_0_DEVICE_INFO_SIZE, 1)                                             \
  S(OnyxEpCreateArgs, ONYX_ABI_V1_0_EP_CREATE_ARGS_SIZE, 1)                                        \
  S(OnyxAllocator, ONYX_ABI_V1_0_ALLOCATOR_SIZE, 1)                                                \
  S(OnyxCompiledKernel, ONYX_ABI_V1_0_COMPILED_KERNEL_SIZE, 1)                                     \
  S(OnyxKernelDef, ONYX_ABI_V1_0_KERNEL_DEF_SIZE, 1)                                               \
  S(OnyxSchemaDef, ONYX_ABI_V1_0_SCHEMA_DEF_SIZE, 1)                                               \
  S(OnyxHostApi, ONYX_ABI_V1_0_HOST_API_SIZE, 1)                                                   \
  S(OnyxProvider, ONYX_ABI_V1_0_PROVIDER_SIZE, 1)                                                  \
  S(OnyxEp, ONYX_ABI_V1_0_EP_SIZE, 1)

#define ABI_V1_0_FIELDS(X)                                                                         \
  X(OnyxMemoryDevice, kind)                                                                        \
  X(OnyxMemoryDevice, vendor_id)                                                                   \
  X(OnyxMemoryDevice, device_id)                                                                   \
  X(OnyxMemoryDevice, mem_type)                                                                    \
  X(OnyxMemoryDevice, alignment)                                                                   \
  X(OnyxMemoryDevice, reserved)                                                                    \
  X(OnyxExtension, struct_size)                                                                    \
  X(OnyxExtension, type)                                                                           \
  X(OnyxExtension, next)                                                                           \
  X(OnyxTypeConstraint, name)                                                                      \
  X(OnyxTypeConstraint, types)                                                                     \
  X(OnyxTypeConstraint, type_count)                                                                \
  X(OnyxAlias, output)                                                                             \
  X(OnyxAlias, input)                                                                              \
  X(OnyxAlias, kind)                                                                               \
  X(OnyxFormalParam, name)                                                                         \
  X(OnyxFormalParam, type_constraint)                                                              \
  X(OnyxFormalParam, option)                                                                       \
  X(OnyxAttrDef, name)                                                                             \
  X(OnyxAttrDef, type)                                                                             \
  X(OnyxAttrDef, required)                                                                         \
  X(OnyxAttrDef, has_default)                                                                      \
  X(OnyxAttrDef, default_int)                                                                      \
  X(OnyxAttrDef, default_float)                                                                    \
  X(OnyxAttrDef, default_string)                                                                   \
  X(OnyxDeviceInfo, struct_size)                                                                   \
  X(OnyxDeviceInfo, name)                                                                          \
  X(OnyxDeviceInfo, memory)                                                                        \
  X(OnyxDeviceInfo, memory_bytes)                                                                  \
  X(OnyxDeviceInfo, property_keys)                                                                 \
  X(OnyxDeviceInfo, property_values)                                                               \
  X(OnyxDeviceInfo, property_count)                                                                \
  X(OnyxEpCreateArgs, struct_size)                                                                 \
  X(OnyxEpCreateArgs, device_index)                                                                \
  X(OnyxEpCreateArgs, options)                                                                     \
  X(OnyxEpCreateArgs, thread_pool)                                                                 \
  X(OnyxEpCreateArgs, deterministic)                                                               \
  X(OnyxEpCreateArgs, log_severity)                                                                \
  X(OnyxEpCreateArgs, next)                                                                        \
  X(OnyxAllocator, struct_size)                                                                    \
  X(OnyxAllocator, ctx)                                                                            \
  X(OnyxAllocator, device)                                                                         \
  X(OnyxAllocator, alloc)                                                                          \
  X(OnyxAllocator, free)                                                                           \
  X(OnyxCompiledKernel, struct_size)                                                               \
  X(OnyxCompiledKernel, state)                                                                     \
  X(OnyxCompiledKernel, compute)                                                                   \
  X(OnyxCompiledKernel, release)                                                                   \
  X(OnyxKernelDef, struct_size)                                                                    \
  X(OnyxKernelDef, domain)                                                                         \
  X(OnyxKernelDef, op_type)                                                                        \
  X(OnyxKernelDef, since_version)                                                                  \
  X(OnyxKernelDef, end_version)                                                                    \
  X(OnyxKernelDef, type_constraints)                                                               \
  X(OnyxKernelDef, type_constraint_count)                                                          \
  X(OnyxKernelDef, input_mem_types)                                                                \
  X(OnyxKernelDef, input_mem_type_count)                                                           \
  X(OnyxKernelDef, output_mem_types)                                                               \
  X(OnyxKernelDef, output_mem_type_count)                                                          \
  X(OnyxKernelDef, aliases)                                                                        \
  X(OnyxKernelDef, alias_count)                                                                    \
  X(OnyxKernelDef, create)                                                                         \
  X(OnyxKernelDef, compute)                                                                        \
  X(OnyxKernelDef, release)                                                                        \
  X(OnyxKernelDef, user_data)                                                                      \
  X(OnyxSchemaDef, struct_size)                                                                    \
  X(OnyxSchemaDef, domain)                                                                         \
  X(OnyxSchemaDef, op_type)                                                                        \
  X(OnyxSchemaDef, since_version)                                                                  \
  X(OnyxSchemaDef, inputs)                                                                         \
  X(OnyxSchemaDef, input_count)                                                                    \
  X(OnyxSchemaDef, outputs)                                                                        \
  X(OnyxSchemaDef, output_count)                                                                   \
  X(OnyxSchemaDef, type_constraints)                                                               \
  X(OnyxSchemaDef, type_constraint_count)                                                          \
  X(OnyxSchemaDef, attrs)                                                                          \
  X(OnyxSchemaDef, attr_count)                                                                     \
  X(OnyxSchemaDef, infer)                                                                          \
  X(OnyxSchemaDef, user_data)                                                                      \
  X(OnyxHostApi, struct_size)                                                                      \
  X(OnyxHostApi, abi_major)                                                                        \
  X(OnyxHostApi, abi_minor)                                                                        \
  X(OnyxHostApi, status_create)                                                                    \
  X(OnyxHostApi, status_code)                                                                      \
  X(OnyxHostApi, status_message)                                                                   \
  X(OnyxHostApi, status_release)                                                                   \
  X(OnyxHostApi, log)                                                                              \
  X(OnyxHostApi, library_path)                                                                     \
  X(OnyxHostApi, options_count)                                                                    \
  X(OnyxHostApi, options_key)                                                                      \
  X(OnyxHostApi, options_get)                                                                      \
  X(OnyxHostApi, graph_node_count)                                                                 \
  X(OnyxHostApi, graph_node)                                                                       \
  X(OnyxHostApi, graph_input_count)                                                                \
  X(OnyxHostApi, graph_input)                                                                      \
  X(OnyxHostApi, graph_output_count)                                                               \
  X(OnyxHostApi, graph_output)                                                                     \
  X(OnyxHostApi, node_name)                                                                        \
  X(OnyxHostApi, node_op_type)                                                                     \
  X(OnyxHostApi, node_domain)                                                                      \
  X(OnyxHostApi, node_since_version)                                                               \
  X(OnyxHostApi, node_input_count)                                                                 \
  X(OnyxHostApi, node_input)                                                                       \
  X(OnyxHostApi, node_output_count)                                                                \
  X(OnyxHostApi, node_output)                                                                      \
  X(OnyxHostApi, node_attr_type)                                                                   \
  X(OnyxHostApi, node_attr_int)                                                                    \
  X(OnyxHostApi, node_attr_float)                                                                  \
  X(OnyxHostApi, node_attr_string)                                                                 \
  X(OnyxHostApi, node_attr_ints)                                                                   \
  X(OnyxHostApi, node_attr_floats)                                                                 \
  X(OnyxHostApi, node_attr_strings)                                                                \
  X(OnyxHostApi, node_attr_tensor)                                                                 \
  X(OnyxHostApi, value_name)                                                                       \
  X(OnyxHostApi, value_elem_type)                                                                  \
  X(OnyxHostApi, value_rank)                                                                       \
  X(OnyxHostApi, value_dims)                                                                       \
  X(OnyxHostApi, value_constant)                                                                   \
  X(OnyxHostApi, value_producer)                                                                   \
  X(OnyxHostApi, tensor_elem_type)                                                                 \
  X(OnyxHostApi, tensor_rank)                                                                      \
  X(OnyxHostApi, tensor_dims)                                                                      \
  X(OnyxHostApi, tensor_elem_count)                                                                \
  X(OnyxHostApi, tensor_byte_size)                                                                 \
  X(OnyxHostApi, tensor_data)                                                                      \
  X(OnyxHostApi, tensor_mutable_data)                                                              \
  X(OnyxHostApi, tensor_memory)                                                                    \
  X(OnyxHostApi, tensor_string)                                                                    \
  X(OnyxHostApi, tensor_set_string)                                                                \
  X(OnyxHostApi, ctx_node)                                                                         \
  X(OnyxHostApi, ctx_input_count)                                                                  \
  X(OnyxHostApi, ctx_input)                                                                        \
  X(OnyxHostApi, ctx_output_count)                                                                 \
  X(OnyxHostApi, ctx_output)                                                                       \
  X(OnyxHostApi, ctx_output_view)                                                                  \
  X(OnyxHostApi, ctx_stream)                                                                       \
  X(OnyxHostApi, ctx_thread_pool)                                                                  \
  X(OnyxHostApi, ctx_scratch)                                                                      \
  X(OnyxHostApi, thread_pool_size)                                                                 \
  X(OnyxHostApi, parallel_for)                                                                     \
  X(OnyxHostApi, claim_node)                                                                       \
  X(OnyxHostApi, claim_group)                                                                      \
  X(OnyxHostApi, decline_node)                                                                     \
  X(OnyxHostApi, mark_cheap)                                                                       \
  X(OnyxHostApi, has_kernel)                                                                       \
  X(OnyxHostApi, register_kernel)                                                                  \
  X(OnyxHostApi, register_schema)                                                                  \
  X(OnyxHostApi, infer_node)                                                                       \
  X(OnyxHostApi, infer_input_count)                                                                \
  X(OnyxHostApi, infer_input)                                                                      \
  X(OnyxHostApi, infer_set_output)                                                                 \
  X(OnyxProvider, struct_size)                                                                     \
  X(OnyxProvider, abi_major)                                                                       \
  X(OnyxProvider, abi_minor)                                                                       \
  X(OnyxProvider, name)                                                                            \
  X(OnyxProvider, vendor)                                                                          \
  X(OnyxProvider, version)                                                                         \
  X(OnyxProvider, ctx)                                                                             \
  X(OnyxProvider, next)                                                                            \
  X(OnyxProvider, device_count)                                                                    \
  X(OnyxProvider, device_info)                                                                     \
  X(OnyxProvider, score)                                                                           \
  X(OnyxProvider, register_kernels)                                                                \
  X(OnyxProvider, register_schemas)                                                                \
  X(OnyxProvider, create_ep)                                                                       \
  X(OnyxProvider, release)                                                                         \
  X(OnyxEp, struct_size)                                                                           \
  X(OnyxEp, ctx)                                                                                   \
  X(OnyxEp, provider)                                                                              \
  X(OnyxEp, next)                                                                                  \
  X(OnyxEp, get_capability)                                                                        \
  X(OnyxEp, compile)                                                                               \
  X(OnyxEp, get_allocator)                                                                         \
  X(OnyxEp, can_copy)                                                                              \
  X(OnyxEp, copy_tensors)                                                                          \
  X(OnyxEp, create_stream)                                                                         \
  X(OnyxEp, release_stream)                                                                        \
  X(OnyxEp, sync_stream)                                                                           \
  X(OnyxEp, create_event)                                                                          \
  X(OnyxEp, record_event)                                                                          \
  X(OnyxEp, wait_event)                                                                            \
  X(OnyxEp, release_event)                                                                         \
  X(OnyxEp, release)

#endif
