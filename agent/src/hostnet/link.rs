//! The `localdns` link through rtnetlink: observe it (kind from `IFLA_LINKINFO`), create the dummy,
//! bring it up, add and remove addresses, delete it.

use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use rtnetlink::{Handle, LinkDummy, LinkUnspec};

/// A netlink request failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("could not open a netlink socket")]
    Open(#[source] std::io::Error),
    #[error("cannot create dummy link {name}: this kernel has no dummy link type (CONFIG_DUMMY)")]
    NoDummySupport {
        name: String,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("netlink: could not {what}")]
    Request {
        what: String,
        #[source]
        source: rtnetlink::Error,
    },
}

/// The link as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedLink {
    pub index: u32,
    /// `IFLA_INFO_KIND` (`dummy`, `bridge`, ...); `None` for kinds without one (e.g. a physical NIC).
    pub kind: Option<String>,
    pub up: bool,
    /// IPv4 addresses with their prefix lengths.
    pub ipv4: Vec<(Ipv4Addr, u8)>,
}

/// A netlink connection with its own single-threaded runtime, used from synchronous code.
pub struct Netlink {
    runtime: tokio::runtime::Runtime,
    handle: Handle,
}

fn request(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> LinkError {
    let what = what.into();
    move |source| LinkError::Request { what, source }
}

fn is_errno(err: &rtnetlink::Error, errno: i32) -> bool {
    matches!(err, rtnetlink::Error::NetlinkError(msg) if msg.raw_code() == -errno)
}

fn kind_of(msg: &LinkMessage) -> Option<String> {
    msg.attributes.iter().find_map(|attr| match attr {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|info| match info {
            LinkInfo::Kind(kind) => Some(kind.to_string()),
            _ => None,
        }),
        _ => None,
    })
}

fn ipv4_of(msg: &AddressMessage) -> Option<(Ipv4Addr, u8)> {
    // IFA_LOCAL is the address itself; IFA_ADDRESS is the peer on point-to-point links.
    let local = msg.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(IpAddr::V4(ip)) => Some(*ip),
        _ => None,
    });
    let address = msg.attributes.iter().find_map(|a| match a {
        AddressAttribute::Address(IpAddr::V4(ip)) => Some(*ip),
        _ => None,
    });
    local.or(address).map(|ip| (ip, msg.header.prefix_len))
}

impl Netlink {
    /// Opens a route netlink socket in the calling thread's network namespace.
    pub fn open() -> Result<Self, LinkError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(LinkError::Open)?;
        let handle = runtime.block_on(async {
            let (connection, handle, _) = rtnetlink::new_connection()?;
            tokio::spawn(connection);
            Ok::<_, std::io::Error>(handle)
        });
        Ok(Netlink {
            runtime,
            handle: handle.map_err(LinkError::Open)?,
        })
    }

    /// The link called `name`, or `None`.
    pub fn observe(&self, name: &str) -> Result<Option<ObservedLink>, LinkError> {
        self.runtime.block_on(async {
            let found = self
                .handle
                .link()
                .get()
                .match_name(name.to_string())
                .execute()
                .try_next()
                .await;
            let msg = match found {
                Ok(Some(msg)) => msg,
                Ok(None) => return Ok(None),
                Err(err) if is_errno(&err, nix::errno::Errno::ENODEV as i32) => return Ok(None),
                Err(err) => return Err(request(format!("look up link {name}"))(err)),
            };
            let index = msg.header.index;
            let addrs: Vec<AddressMessage> = self
                .handle
                .address()
                .get()
                .set_link_index_filter(index)
                .execute()
                .try_collect()
                .await
                .map_err(request(format!("list addresses of {name}")))?;
            Ok(Some(ObservedLink {
                index,
                kind: kind_of(&msg),
                up: msg.header.flags.contains(LinkFlags::Up),
                ipv4: addrs
                    .iter()
                    .filter(|a| a.header.index == index)
                    .filter_map(ipv4_of)
                    .collect(),
            }))
        })
    }

    /// Creates a dummy link called `name`.
    pub fn create_dummy(&self, name: &str) -> Result<(), LinkError> {
        match self
            .runtime
            .block_on(self.handle.link().add(LinkDummy::new(name).build()).execute())
        {
            Err(err) if is_errno(&err, nix::errno::Errno::EOPNOTSUPP as i32) => {
                Err(LinkError::NoDummySupport {
                    name: name.to_owned(),
                    source: err,
                })
            }
            other => other.map_err(request(format!("create dummy link {name}"))),
        }
    }

    /// Sets the link administratively up.
    pub fn set_up(&self, index: u32) -> Result<(), LinkError> {
        self.runtime
            .block_on(
                self.handle
                    .link()
                    .set(LinkUnspec::new_with_index(index).up().build())
                    .execute(),
            )
            .map_err(request(format!("set link {index} up")))
    }

    /// Adds `ip/prefix` to the link.
    pub fn add_address(&self, index: u32, ip: Ipv4Addr, prefix: u8) -> Result<(), LinkError> {
        self.runtime
            .block_on(self.handle.address().add(index, IpAddr::V4(ip), prefix).execute())
            .map_err(request(format!("add {ip}/{prefix} to link {index}")))
    }

    /// Removes `ip/prefix` from the link.
    pub fn remove_address(&self, index: u32, ip: Ipv4Addr, prefix: u8) -> Result<(), LinkError> {
        self.runtime.block_on(async {
            let addrs: Vec<AddressMessage> = self
                .handle
                .address()
                .get()
                .set_link_index_filter(index)
                .execute()
                .try_collect()
                .await
                .map_err(request(format!("list addresses of link {index}")))?;
            for msg in addrs {
                if msg.header.index == index && ipv4_of(&msg) == Some((ip, prefix)) {
                    self.handle
                        .address()
                        .del(msg)
                        .execute()
                        .await
                        .map_err(request(format!("remove {ip}/{prefix} from link {index}")))?;
                }
            }
            Ok(())
        })
    }

    /// Every IPv4 address of every link, with the link's name.
    pub fn all_ipv4(&self) -> Result<Vec<(String, Ipv4Addr, u8)>, LinkError> {
        self.runtime.block_on(async {
            let links: Vec<LinkMessage> = self
                .handle
                .link()
                .get()
                .execute()
                .try_collect()
                .await
                .map_err(request("list links"))?;
            let name_of = |index: u32| {
                links
                    .iter()
                    .find(|l| l.header.index == index)
                    .and_then(|l| {
                        l.attributes.iter().find_map(|a| match a {
                            LinkAttribute::IfName(name) => Some(name.clone()),
                            _ => None,
                        })
                    })
                    .unwrap_or_else(|| format!("link {index}"))
            };
            let addrs: Vec<AddressMessage> = self
                .handle
                .address()
                .get()
                .execute()
                .try_collect()
                .await
                .map_err(request("list addresses"))?;
            Ok(addrs
                .iter()
                .filter_map(|a| ipv4_of(a).map(|(ip, prefix)| (name_of(a.header.index), ip, prefix)))
                .collect())
        })
    }

    /// Deletes the link.
    pub fn delete(&self, index: u32) -> Result<(), LinkError> {
        self.runtime
            .block_on(self.handle.link().del(index).execute())
            .map_err(request(format!("delete link {index}")))
    }
}
