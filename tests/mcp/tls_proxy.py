"""A TLS-terminating reverse proxy, as an operator puts in front of `idemwatch serve`
(which speaks plain HTTP): accepts TLS on 127.0.0.1:REFUND_PORT with CERT and KEY and
pipes each connection's bytes to 127.0.0.1:BACKEND_PORT.

  REFUND_PORT   the port to listen on (the name processes.running sets)
  BACKEND_PORT  serve's port
  CERT, KEY     the certificate and key (PEM files)
"""

import asyncio
import os
import ssl


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def handle(client_reader, client_writer):
    try:
        backend_reader, backend_writer = await asyncio.open_connection("127.0.0.1", int(os.environ["BACKEND_PORT"]))
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(pipe(client_reader, backend_writer), pipe(backend_reader, client_writer))


async def main():
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(os.environ["CERT"], os.environ["KEY"])
    server = await asyncio.start_server(handle, "127.0.0.1", int(os.environ["REFUND_PORT"]), ssl=context)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
